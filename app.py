"""Training Gate dashboard: `streamlit run app.py` (the ledger is $GATE_DB, else data/gate.duckdb).

The router: the shared frame (ui.frame: page config, the demo history on first start with a new
ledger in local mode or for a planner — ui_demo —, the sidebar filters applied on every page; a locked, unreadable or wrong ledger shows a
message instead) and the list of pages, which live in pages/.

Streamlit 1.67 runs a process in its classic multipage mode until st.navigation has run once in it:
a first request straight to a page URL then runs pages/<n>_<Title>.py without this file. So every page
script starts with ui.frame() too (drawn once per run, whichever way the page runs), and each page's
file name gives, in classic mode, the title and URL path it has here (`url_path` set explicitly).

With sign-in configured ([auth] in .streamlit/secrets.toml) a signed-out session sees only the sign-in
screen, and the navigation lists only the pages the signed-in role may use (ui.may_open).
"""
import streamlit as st

import ui

PAGES = [  # (script, title, icon): the classic-mode label of pages/<n>_<Title>.py is <Title>
    ("pages/0_Overview.py", "Overview", "📊"),
    ("pages/1_Reservations.py", "Reservations", "📅"),
    ("pages/2_Idle_reserved_capacity.py", "Idle reserved capacity", "⏳"),
    ("pages/8_Policy_replay.py", "Policy replay", "⏪"),
    ("pages/9_Forecast.py", "Forecast", "🔮"),
    ("pages/3_Estimate_accuracy.py", "Estimate accuracy", "🎯"),
    ("pages/4_What-if.py", "What-if", "🧪"),
    ("pages/5_Recovery_planner.py", "Recovery planner", "🔁"),
    ("pages/6_Upload.py", "Upload", "📤"),
    ("pages/7_Stops_and_promotion.py", "Stops and promotion", "⛔"),
]


def url_path(script: str) -> str:
    """The URL path classic mode gives pages/<n>_<Title>.py: <Title> (spaces as underscores)."""
    return script.removeprefix("pages/").removesuffix(".py").split("_", 1)[1]


if ui.signed_out():   # sign-in configured and nobody signed in: the sign-in screen is the only page
    st.navigation([st.Page(ui.sign_in_screen, title="Sign in", url_path="sign-in")], position="hidden").run()
    st.stop()
# a page this session's role may not use is not listed (and the page itself refuses: ui.require)
page = st.navigation([st.Page(script, title=title, icon=icon, url_path=url_path(script), default=(i == 0))
                      for i, (script, title, icon) in enumerate(PAGES) if i == 0 or ui.may_open(script)])
ui.frame()
page.run()
