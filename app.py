"""Training Gate dashboard: `streamlit run app.py` (the ledger is $GATE_DB, else data/gate.duckdb).

The router: page config, the demo history on first start with an empty ledger, the shared sidebar
filters (applied on every page), and the list of pages. A locked, unreadable or wrong ledger shows
a message on every page instead of the page.

The page scripts live in app_pages/, not pages/: Streamlit 1.67 still treats a `pages/` folder next
to the entry script as a v1 multipage app until st.navigation has run once in the process, so a
first request straight to a page URL (and every AppTest.switch_page) would run the page script
without this file — without the sidebar filters or the demo bootstrap.
"""
import streamlit as st

import ui_cache as ui

st.set_page_config(page_title="Training Gate", page_icon=":material/traffic:", layout="wide")

PAGES = [
    st.Page("app_pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("app_pages/reservations.py", title="Reservations", icon=":material/event:"),
    st.Page("app_pages/idle_capacity.py", title="Idle reserved capacity", icon=":material/hourglass_empty:"),
    st.Page("app_pages/estimate_accuracy.py", title="Estimate accuracy", icon=":material/target:"),
    st.Page("app_pages/what_if.py", title="What-if", icon=":material/science:"),
    st.Page("app_pages/recovery_planner.py", title="Recovery planner", icon=":material/restart_alt:"),
    st.Page("app_pages/upload.py", title="Upload", icon=":material/upload_file:"),
    st.Page("app_pages/stops_promotion.py", title="Stops and promotion", icon=":material/block:"),
]

page = st.navigation(PAGES)
with ui.ledger_errors("Reload the page in a moment."):
    ui.ensure_ledger()
    ui.ensure_demo()
    ui.filter_widgets()
page.run()
