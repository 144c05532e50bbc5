"""The README and the manual in docs/ hold together: every relative link lands on a file and, when it
names an #anchor, on a heading of that file; the README stays a short first page that keeps the two
commands CI reads; and every section of the README it replaced is still a heading of some docs page."""
import os
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# The commands the README must show as they are (.ci/run runs the second one).
APP_COMMAND = "python3 -m pip install -r requirements.txt && python3 -m streamlit run app.py"
TEST_COMMAND = "python3 -m pip install -r requirements.txt && python3 -m pytest -q"
README_MAX_LINES = 300

# Every section of the README before it became a short first page (frozen: a title is never dropped
# from here). Each is a heading of some docs/*.md page, but "The two commands", which the README keeps.
OLD_README_SECTIONS = (
    "Layout",
    "The request format",
    "The decision",
    "Team policy (`data/teams.toml`)",
    "The command line (`python -m lib`)",
    "Run history: the CSV format and Slurm `sacct`",
    "The dashboard",
    "Deploying for a team",
    "Several clusters, one budget",
    "The forward plan and the cluster's pools",
    "Policy replay: the baseline, the capacity what-if and quota right-sizing",
    "How the forecast works",
    "Inside Slurm (and Kueue)",
    "How the gate estimates and calibrates",
    "Benchmarks",
    "A long history: 10⁶ and 10⁷ runs",
    "The forward plan's cost",
)
README_KEEPS = ("The two commands",)

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def headings(text: str) -> list[str]:
    """The text of every ATX heading outside code blocks, in order."""
    return [m.group(2) for _, line in prose_lines(text) if (m := HEADING.match(line))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text as shown (code marks, emphasis and link targets
    dropped), lowercased; spaces become '-'; letters (any script), marks, decimal digits, '-' and '_'
    stay; everything else (punctuation, symbols, superscripts) goes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    out = []
    for ch in text.strip().lower():
        if ch == " ":
            out.append("-")
        elif ch in "-_" or unicodedata.category(ch) in ("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me",
                                                        "Nd", "Pc"):
            out.append(ch)
    return "".join(out)


def anchors(path: Path) -> set[str]:
    """Every anchor a file's headings give, with GitHub's -1, -2, ... for repeated slugs."""
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path.read_text(encoding="utf-8")):
        s = slug(h)
        if s in seen:
            seen[s] += 1
            out.add(f"{s}-{seen[s]}")
        else:
            seen[s] = 0
            out.add(s)
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline markdown link outside code, images included."""
    out = []
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        bare = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
        out += [(n, m.group(1)) for m in LINK.finditer(bare)]
    return out


def link_problems(path: Path) -> list[str]:
    """Each relative link of a file that names no existing file, or an anchor no heading gives."""
    problems, here = [], os.path.relpath(path, ROOT)
    for n, target in links(path):
        if EXTERNAL.match(target):
            continue
        where, _, anchor = target.partition("#")
        dest = (path.parent / where).resolve() if where else path
        if not dest.exists():
            problems.append(f"{here}:{n}: {target}: no such file {where}")
            continue
        if anchor:
            if dest.suffix != ".md":
                problems.append(f"{here}:{n}: {target}: an anchor into a file that is not markdown")
            elif anchor not in anchors(dest):
                problems.append(f"{here}:{n}: {target}: no heading of {os.path.relpath(dest, ROOT)} "
                                f"has the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_lands_on_a_file_and_a_heading(path):
    assert link_problems(path) == []


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "b.md").write_text("# Where to go\n\n## Inside Slurm (and Kueue)\n", encoding="utf-8")
    (tmp_path / "a.md").write_text(
        "# Start\n\n"
        "[fine](b.md#inside-slurm-and-kueue) and [here](#start), `[in code](nowhere.md)`\n"
        "[gone](missing.md) and [no heading](b.md#inside-slurm) and [self](#nope)\n"
        "```\n[in a fence](nowhere.md)\n```\n", encoding="utf-8")
    problems = link_problems(tmp_path / "a.md")
    assert [p.split(": ")[1] for p in problems] == ["missing.md", "b.md#inside-slurm", "#nope"]


@pytest.mark.parametrize("heading, anchor", [
    ("The request format", "the-request-format"),
    ("Team policy (`data/teams.toml`)", "team-policy-datateamstoml"),
    ("The forward plan's cost", "the-forward-plans-cost"),
    ("A long history: 10⁶ and 10⁷ runs", "a-long-history-10-and-10-runs"),
    ("Failure policy: `TG_ON_GATE_FAILURE=refuse | accept-and-flag`",
     "failure-policy-tg_on_gate_failurerefuse--accept-and-flag"),
    ("Évaluation des coûts", "évaluation-des-coûts"),
])
def test_anchors_are_githubs_slugs(heading, anchor):
    assert slug(heading) == anchor


def test_the_readme_is_a_short_first_page_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) < README_MAX_LINES
    assert APP_COMMAND in lines
    assert TEST_COMMAND in lines


def test_every_section_of_the_old_readme_is_a_heading_of_a_docs_page():
    docs_headings = {h for page in DOCS.glob("*.md") for h in headings(page.read_text(encoding="utf-8"))}
    assert [title for title in OLD_README_SECTIONS if title not in docs_headings] == []
    readme_headings = set(headings(README.read_text(encoding="utf-8")))
    assert [title for title in README_KEEPS if title not in readme_headings] == []


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / target.partition("#")[0]).resolve()
              for _, target in links(README) if not EXTERNAL.match(target)}
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []
