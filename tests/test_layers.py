"""The code's layers, and no import cycles.

lib/, the core: a module never imports a layer above its own, and never Streamlit, the UI kit (ui/),
the app or the tests. From the bottom: the decision (`lib.gate`), planning maths (`lib.planning`), the
ledger (`lib.ledger`), the authority several clusters share (`lib.authority`), then the dashboard's read models (`lib.dashboard`) and the Slurm integration
(`lib.slurm`), and on top the command line (the package `lib.cli`, and `lib.__main__`).

Above lib/: the UI kit (ui/), which imports lib/ and itself; above it app.py and the page scripts in
pages/, which import ui and lib/ only (of this project's code).

No cycles: across lib/ and ui/ no module imports, directly or through others, a module that imports it
back. Imports at any depth count (an import inside a function closes a cycle as soon as it runs).

Imports at the top: an import inside a function in lib/ or ui/ says why on its line or the line above
(the cheap start of the Slurm hook's socket client, a heavy or optional module most callers never need).
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB, UI = ROOT / "lib", ROOT / "ui"
RANK = {"gate": 0, "planning": 1, "ledger": 2, "authority": 3, "dashboard": 4, "slurm": 4, "cli": 5, "__main__": 5}
# the top-level names this project's own code can be imported by (pages/ is not importable)
PROJECT = {"lib", "ui", "app", "tests", "bench"}
ALLOWED = {"lib": {"lib"}, "ui": {"lib", "ui"}, "pages": {"lib", "ui"}}   # whose code may import whose

# Import cycles that are known and being removed elsewhere: each is left out of the cycle test below
# and has its own expected failure, which passes (XPASS) once the cycle is gone. Remove the entry then.
def _layer(module: str) -> str:
    """'lib.ledger.state' -> 'ledger'; 'lib' itself -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path, root: Path = ROOT) -> str:
    """lib/ledger/service.py -> 'lib.ledger.service'; a package's __init__.py -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, at any depth (imports inside functions count);
    `from lib import x` is `lib.x`."""
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
UI_MODULES = sorted(UI.rglob("*.py"))
SCRIPTS = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


def _ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_module_of_lib_sits_in_a_known_layer():
    for path in MODULES:
        module = ".".join(path.relative_to(LIB.parent).with_suffix("").parts)
        assert _layer(module) in RANK or module == "lib.__init__", f"{module} is in no layer"


@pytest.mark.parametrize("path", MODULES, ids=_ids)
def test_no_module_imports_a_layer_above_its_own_or_streamlit(path):
    module = ".".join(path.relative_to(LIB.parent).with_suffix("").parts)
    own = RANK.get(_layer(module), -1)
    for line, imported in _imports(path):
        assert not imported.startswith("streamlit"), f"{module}:{line} imports Streamlit"
        if imported.startswith("lib."):
            layer = _layer(imported)
            assert RANK[layer] <= own, (
                f"{module}:{line} imports {imported} (layer '{layer}' is above '{_layer(module)}')")


@pytest.mark.parametrize("path", MODULES + UI_MODULES + SCRIPTS, ids=_ids)
def test_the_project_code_a_file_imports_is_below_it(path):
    """lib/ imports only lib/ (never ui, the app or the tests); ui/ imports lib/ and ui/; app.py and
    the page scripts import ui and lib/."""
    who = "pages" if path in SCRIPTS else path.relative_to(ROOT).parts[0]
    for line, imported in _imports(path):
        top = imported.split(".")[0]
        assert top not in PROJECT or top in ALLOWED[who], f"{_ids(path)}:{line} imports {imported}"


# ------------------------------------------------------------------------------------ cycles

def import_graph(files: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of `files` (below `root`) it imports, at any depth in the file. `from a
    import b` is an import of the module a.b when there is one, else of a; a relative import is
    resolved against the importing module's package. A package's __init__ counts only where it is
    imported by name (not as the parent of a submodule imported)."""
    modules = {module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            graph[module] |= {t for t in targets if t in modules and t != module}
    return graph


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _shortest_path(graph, start: str, goal: str, within: set[str]) -> list[str]:
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        if path[-1] == goal:
            return path
        for nxt in sorted(graph[path[-1]] & within):
            if nxt not in seen:
                seen.add(nxt)
                paths.append(path + [nxt])
    raise AssertionError(f"no path from {start} to {goal} in a strongly connected component")


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of imports, each as its modules in import order with the first repeated at the end:
    for every import a -> b inside a group of modules that reach each other, the shortest way back
    from b to a (so every import that closes a cycle is in some chain); each cycle once."""
    cycles, seen = [], set()
    for component in _components(graph):
        for a in sorted(component):
            for b in sorted(graph[a] & component):
                cycle = [a, *_shortest_path(graph, b, a, component)]   # a -> b -> ... -> a
                ring = cycle[:-1]
                turn = ring.index(min(ring))
                key = tuple(ring[turn:] + ring[:turn])
                if key not in seen:
                    seen.add(key)
                    cycles.append(list(key) + [key[0]])
    return sorted(cycles)


def _chain(cycle: list[str]) -> str:
    return " -> ".join(cycle)


def test_the_cycle_finder_reports_every_cycle_as_a_chain():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"b"}, "e": {"a"}, "f": set()}
    assert [_chain(c) for c in import_cycles(graph)] == ["a -> b -> a", "b -> c -> d -> b"]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_counts_imports_at_any_depth_and_resolves_submodules(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.one import x\n")
    (pkg / "one.py").write_text("def f():\n    from pkg import two\n    return two\nx = 1\n")
    (pkg / "two.py").write_text("from . import one\nimport pkg.three\n")
    (pkg / "three.py").write_text("import json\n")
    graph = import_graph(sorted(pkg.glob("*.py")), tmp_path)
    assert graph == {"pkg": {"pkg.one"}, "pkg.one": {"pkg.two"}, "pkg.two": {"pkg.one", "pkg.three"},
                     "pkg.three": set()}
    assert [_chain(c) for c in import_cycles(graph)] == ["pkg.one -> pkg.two -> pkg.one"]


def test_no_import_cycle_across_lib_and_ui():
    cycles = import_cycles(import_graph(MODULES + UI_MODULES))
    assert [_chain(c) for c in cycles] == []


# ------------------------------------------------------------------------------ imports inside functions

def unexplained_function_imports(source: str) -> list[int]:
    """The lines of imports inside a function that give no reason: no comment on the import's line or
    the line above. An import directly below another one (blank lines between allowed) shares that
    one's reason, so one comment can explain a block."""
    lines = source.splitlines()
    comments = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}

    def commented(lineno: int) -> bool:
        return lineno in comments or lineno - 1 in comments

    found = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                explained = False
                for i, stmt in enumerate(block):
                    if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                        explained = False
                        continue
                    follows = (i > 0 and isinstance(block[i - 1], (ast.Import, ast.ImportFrom))
                               and all(not lines[n - 1].strip()
                                       for n in range(block[i - 1].end_lineno + 1, stmt.lineno)))
                    explained = commented(stmt.lineno) or (follows and explained)
                    if not explained:
                        found.append(stmt.lineno)
    return sorted(set(found))


def test_the_unexplained_import_finder():
    source = """import json
def f():
    import os
    import sys  # a reason
    # a reason for both
    import re
    import time

    import math
    x = 1
    import heapq
    try:  # a reason
        import pwd
    except ImportError:
        import grp
"""
    assert unexplained_function_imports(source) == [3, 11, 15]


@pytest.mark.parametrize("path", MODULES + UI_MODULES,
                         ids=_ids)
def test_an_import_inside_a_function_says_why(path):
    lines = unexplained_function_imports(path.read_text(encoding="utf-8"))
    assert lines == [], (f"{_ids(path)}: imports inside a function at lines {lines} give no reason: move "
                         "them to the top, or say on the line (or the line above) why they wait")
