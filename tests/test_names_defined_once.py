"""One name per thing: no public top-level name (function, class or module constant) is defined in two
modules of lib/ or ui/, so a reader who meets a name knows which thing it is.

Private names (a leading underscore) are each module's own business and may repeat. The deliberate
repeats are listed in DELIBERATE with why.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> why it may be defined in several modules
DELIBERATE = {
    "main": "each `python -m` entry point (the command line, the Slurm hook, server, epilog, run-outs) has its own",
    "__all__": "a module's list of exports",
}


def top_level_names(path: Path) -> list[str]:
    """The names a module defines at its top level: functions, classes, and assigned names."""
    names = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names += [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def defined_twice(files: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    """Public name -> the modules (paths below root) that define it, for names defined in two or more."""
    where = defaultdict(set)
    for path in files:
        for name in top_level_names(path):
            if not name.startswith("_") or name == "__all__":
                where[name].add(str(path.relative_to(root)))
    return {name: sorted(paths) for name, paths in where.items() if len(paths) > 1}


def test_no_public_name_is_defined_in_two_modules():
    files = sorted([*(ROOT / "lib").rglob("*.py"), *(ROOT / "ui").rglob("*.py")])
    twice = {name: paths for name, paths in defined_twice(files).items() if name not in DELIBERATE}
    assert not twice, "defined in several modules (give each thing one name): " + "; ".join(
        f"{name} in {', '.join(paths)}" for name, paths in sorted(twice.items()))


def test_the_finder_sees_a_name_defined_twice(tmp_path):
    (tmp_path / "a.py").write_text("LIMIT = 1\ndef frame(): pass\n_own = 1\n")
    (tmp_path / "b.py").write_text("class frame: pass\nLIMIT: int = 2\n_own = 2\nA, B = 1, 2\n")
    (tmp_path / "c.py").write_text("B = 3\n")
    assert defined_twice([tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"], tmp_path) == {
        "LIMIT": ["a.py", "b.py"], "frame": ["a.py", "b.py"], "B": ["b.py", "c.py"]}
