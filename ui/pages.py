"""The dashboard's pages, each written here once: its script, navigation title, icon, and the action
(lib.gate.access) a role needs to open it. app.py builds st.navigation from PAGES, the kit's access
check reads each page's action (ui.access.may_open), and the tests and benchmarks find a page's script
by its short name. Plain data: no Streamlit here.

The scripts live in pages/, named `<n>_<Title>.py`: Streamlit's classic multipage mode (a fresh
process's first request straight to a page URL, see docs/dashboard.md) labels such a file
<Title> (underscores as spaces) at URL /<Title>, so each title here is its file's <Title> and
`url_path` gives st.navigation the same path.
"""
from __future__ import annotations

from typing import NamedTuple

PAGE_TITLE = "Training Gate"   # the app's name: the sign-in screen's tab title, and each page's after its own
PAGE_ICON = "🚦"


class Page(NamedTuple):
    name: str                  # short name (tests, benchmarks)
    script: str                # pages/<n>_<Title>.py, relative to app.py
    title: str                 # the navigation title: <Title>, underscores as spaces
    icon: str
    action: str | None = None  # what a role must may() to open it (lib.gate.access.ACTIONS); None: every role


PAGES = (   # in navigation order; the first is the default page (URL /)
    Page("overview", "pages/0_Overview.py", "Overview", "📊"),
    Page("reservations", "pages/1_Reservations.py", "Reservations", "📅"),
    Page("idle_capacity", "pages/2_Idle_reserved_capacity.py", "Idle reserved capacity", "⏳"),
    Page("policy_replay", "pages/8_Policy_replay.py", "Policy replay", "⏪", "policy"),
    Page("forecast", "pages/9_Forecast.py", "Forecast", "🔮"),
    Page("estimate_accuracy", "pages/3_Estimate_accuracy.py", "Estimate accuracy", "🎯"),
    Page("what_if", "pages/4_What-if.py", "What-if", "🧪", "what-if"),
    Page("recovery_planner", "pages/5_Recovery_planner.py", "Recovery planner", "🔁"),
    Page("upload", "pages/6_Upload.py", "Upload", "📤", "import"),
    Page("stops_promotion", "pages/7_Stops_and_promotion.py", "Stops and promotion", "⛔"),
    Page("clusters", "pages/10_Clusters.py", "Clusters", "🗄️"),
)
PAGE_ACTIONS = {p.script: p.action for p in PAGES if p.action}   # a page not listed: every role may open it
_BY_NAME = {p.name: p for p in PAGES}


def url_path(script: str) -> str:
    """The URL path classic mode gives pages/<n>_<Title>.py: <Title> (spaces as underscores)."""
    return script.removeprefix("pages/").removesuffix(".py").split("_", 1)[1]


def page_script(name: str) -> str:
    """The script of a page by short name: 'pages/<n>_<Title>.py' (as AppTest.switch_page takes it)."""
    return _BY_NAME[name].script


def tab_title(script_path: str | None) -> str:
    """The browser tab's title for the page whose script is at `script_path` (absolute, or as in
    PAGES): "<page title> · Training Gate", so that tabs and history tell the pages apart; the app's
    name alone for anything else (the sign-in screen)."""
    path = str(script_path or "").replace("\\", "/")
    for p in PAGES:
        if path == p.script or path.endswith("/" + p.script):
            return f"{p.title} · {PAGE_TITLE}"
    return PAGE_TITLE
