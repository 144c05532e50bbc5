"""Each fixture is defined once under tests/: no name is defined by two functions (in two modules, or twice in
one), so no module's fixture silently shadows conftest's or another's of the same name.

A fixture is a function decorated with `pytest.fixture` (or `fixture` imported from pytest), with or without
arguments; its name is the decorator's `name=` when given, else the function's. Read with `ast` from every
tests/*.py, nothing imported. Fixtures shared by several modules live in tests/conftest.py (its docstring
says so), so no test module imports a fixture from another."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def fixture_name(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name `func` is a fixture under, or None when it is not a fixture."""
    for decorator in func.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if ast.unparse(target) not in ("pytest.fixture", "fixture"):
            continue
        for keyword in call.keywords if call else ():
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return keyword.value.value
        return func.name
    return None


def fixtures_in(source: str) -> list[tuple[str, int]]:
    """(fixture name, line) of every fixture defined in `source`, nested ones (in a class) included."""
    return [(name, node.lineno) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (name := fixture_name(node))]


def definitions(folder: Path = TESTS) -> dict[str, list[str]]:
    """Fixture name -> every place ("file.py:line") it is defined in folder/*.py."""
    places = defaultdict(list)
    for path in sorted(folder.glob("*.py")):
        for name, line in fixtures_in(path.read_text(encoding="utf-8")):
            places[name].append(f"{path.name}:{line}")
    return places


def test_the_finder_sees_every_form_of_the_decorator():
    source = ("import pytest\nfrom pytest import fixture\n"
              "@pytest.fixture\ndef a(): pass\n"
              "@pytest.fixture(scope='module')\ndef b(): pass\n"
              "@pytest.fixture(name='c')\ndef not_c(): pass\n"
              "@fixture\ndef d(): pass\n"
              "class T:\n    @pytest.fixture()\n    def e(self): pass\n"
              "@pytest.mark.parametrize('x', [1])\ndef test_f(x): pass\n")
    assert [name for name, _ in fixtures_in(source)] == ["a", "b", "c", "d", "e"]


def test_no_fixture_name_is_defined_twice():
    twice = {name: where for name, where in definitions().items() if len(where) > 1}
    assert not twice, "fixtures defined in more than one place (give each one name, or share one in conftest.py): " \
                      + "; ".join(f"{name}: {', '.join(where)}" for name, where in sorted(twice.items()))


def test_no_test_module_imports_a_fixture_of_another():
    defined = {name: where[0].split(":")[0] for name, where in definitions().items()}
    imported = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
                imported += [f"{path.name} imports {a.name} from {node.module}" for a in node.names
                             if defined.get(a.name) == node.module.split(".")[-1] + ".py"]
    assert not imported, "; ".join(imported) + " (a shared fixture belongs in conftest.py)"
