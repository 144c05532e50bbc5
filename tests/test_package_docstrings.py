"""Each package says what is in it: its `__init__.py` docstring lists every module and subpackage, one
bullet each (`- `name`: what it is for`), and names none that does not exist. A newcomer reads the
package's docstring as its map, so a stale map fails here."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p.parent for root in ("lib", "ui") for p in (ROOT / root).rglob("__init__.py"))
# `- name:`, `- `name``, `- `name/` (a package)`, `- ui.name:`: the name a bullet lists
BULLET = re.compile(r"^- `?(?:[\w]+\.)*(\w+)/?`?(?: \(a package\))?\s*[:—(-]", re.M)


def listed(package: Path) -> set[str]:
    """The names the package's docstring lists as bullets."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    return set(BULLET.findall(doc))


def contents(package: Path) -> set[str]:
    """The package's modules (but __init__ and __main__) and subpackages."""
    modules = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return modules | {p.parent.name for p in package.glob("*/__init__.py")}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_package_docstring_lists_exactly_its_modules(package):
    names, there = listed(package), contents(package)
    assert not there - names, f"{package.relative_to(ROOT)}: its docstring does not list {sorted(there - names)}"
    assert not names - there, f"{package.relative_to(ROOT)}: its docstring lists {sorted(names - there)}, not there"


def test_the_bullet_reader_reads_each_form(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Map.\n\n- `a`: one.\n- b: two.\n- `c/` (a package): three.\n'
                                          '- ui.d: four.\n\nNot a bullet: e.\n"""\n')
    assert listed(tmp_path) == {"a", "b", "c", "d"}
