"""The core's layers: a module of lib/ never imports a layer above its own, and never Streamlit.

From the bottom: the decision (`lib.gate`), planning maths (`lib.planning`), the ledger (`lib.ledger`),
then the dashboard's read models (`lib.dashboard`) and the Slurm integration (`lib.slurm`), and on
top the command line (`lib.cli`, its argument types `lib.cli_args`, `lib.__main__`).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parent.parent / "lib"
RANK = {"gate": 0, "planning": 1, "ledger": 2, "dashboard": 3, "slurm": 3, "cli": 4, "cli_args": 4, "__main__": 4}


def _layer(module: str) -> str:
    """'lib.ledger.state' -> 'ledger'; 'lib' itself -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, at any depth (imports inside functions count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "lib":
                found += [(node.lineno, f"lib.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


MODULES = sorted(p for p in LIB.rglob("*.py"))


def test_every_module_of_lib_sits_in_a_known_layer():
    for path in MODULES:
        module = ".".join(path.relative_to(LIB.parent).with_suffix("").parts)
        assert _layer(module) in RANK or module == "lib.__init__", f"{module} is in no layer"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB.parent)))
def test_no_module_imports_a_layer_above_its_own_or_streamlit(path):
    module = ".".join(path.relative_to(LIB.parent).with_suffix("").parts)
    own = RANK.get(_layer(module), -1)
    for line, imported in _imports(path):
        assert not imported.startswith("streamlit"), f"{module}:{line} imports Streamlit"
        if imported.startswith("lib."):
            layer = _layer(imported)
            assert RANK[layer] <= own, (
                f"{module}:{line} imports {imported} (layer '{layer}' is above '{_layer(module)}')")
