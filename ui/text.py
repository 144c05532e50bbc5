"""Text on a page: user data shown as typed (`as_text`, `caption`), the budget outlook message, the
'Terms used here' glossary, and a progress callback for st.progress. The bottom of the kit: it imports
no other module of ui/.
"""
from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from lib.dashboard import figure_text, labels
from lib.dashboard.tables import escape_markdown

WORD_JOINER = "\u2060"  # invisible, no width, and no line break: the text reads as typed
_AUTOLINK_START = re.compile(r"(?i)(www)(?=\\?\.)|([:@])")


def as_text(text) -> str:
    """`text` (possibly user data: team names, run IDs, file names, messages quoting them) for a
    Streamlit Markdown body (st.caption, st.markdown, alerts), shown as typed: never markup, a link,
    an emoji shortcode or a directive.

    escape_markdown backslash-escapes every Markdown character, but GitHub-flavoured Markdown
    links bare URLs and e-mail addresses *after* parsing (remark-gfm's autolink-literal
    transform works on the unescaped text), so `https://…`, `www.…` and `a@b.c` would still
    become live links. A word joiner after every ':' and '@' and after 'www' breaks those
    patterns (and `:emoji:` shortcodes) without changing what the reader sees. Bidirectional
    controls (which would reorder the rest of the line) are shown as `[U+202E]`."""
    text = figure_text.visible_controls(str(text))
    return _AUTOLINK_START.sub(lambda m: (m.group(1) or m.group(2)) + WORD_JOINER, escape_markdown(text))


def caption(text: str) -> None:
    """A caption whose text (possibly user data) shows as typed, never as markup or a link."""
    st.caption(as_text(text))


def show_budget_outlook(burn: pd.DataFrame, *, quiet: bool = False) -> None:
    """Name the teams projected (P50) to use up this month's budget, with the day
    (lib.dashboard.forecasts burn rows); otherwise say none is, and which might at P90 — unless
    `quiet`, where a page shows only the warning."""
    if burn.empty:
        return
    at_risk = burn[burn["exhausts_p50"].notna()]
    if len(at_risk):
        st.warning(f"{len(at_risk)} team(s) projected (P50) to use up their monthly budget before month end: "
                   + ", ".join(f"{as_text(t)} on {d:%b %d}" for t, d in zip(at_risk["team"], at_risk["exhausts_p50"])))
    elif not quiet:
        risky = burn[burn["exhausts_p90"].notna()]
        st.success("No team is projected (P50) to use up its budget this month"
                   + (f"; at P90, {len(risky)} might: " + ", ".join(as_text(t) for t in risky["team"])
                      if len(risky) else "."))


def glossary(*terms: str) -> None:
    """A folded 'Terms used here' box explaining each term (lib.dashboard.labels.GLOSSARY)."""
    with st.expander("Terms used here"):
        st.markdown("\n".join(f"- **{term}**: {labels.GLOSSARY[term]}" for term in terms))


def import_progress(bar):
    """A progress callback (import_runs, the demo build) drawing into a st.progress bar."""
    def progress(fraction, message=""):
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=str(message))
    return progress
