"""Training Gate dashboard: `streamlit run app.py` (the ledger is $GATE_DB, else data/gate.duckdb).

The router: the shared frame (ui.frame: page config, the demo history on first start with a new
ledger in local mode or for a planner — ui.demo —, the sidebar filters applied on every page; a locked,
unreadable or wrong ledger shows a message instead) and the pages, which live in pages/ and are listed
in ui/pages.py (ui.PAGES).

Streamlit 1.67 runs a process in its classic multipage mode until st.navigation has run once in it:
a first request straight to a page URL then runs pages/<n>_<Title>.py without this file. So every page
script starts with ui.frame() too (drawn once per run, whichever way the page runs), and each page's
file name gives, in classic mode, the title and URL path it has here (`url_path` set explicitly).

With sign-in configured ([auth] in .streamlit/secrets.toml) a signed-out session sees only the sign-in
screen, and the navigation lists only the pages the signed-in role may use (ui.may_open).
"""
import streamlit as st

import ui

if ui.signed_out():   # sign-in configured and nobody signed in: the sign-in screen is the only page
    st.navigation([st.Page(ui.sign_in_screen, title="Sign in", url_path="sign-in")], position="hidden").run()
    st.stop()
# a page this session's role may not use is not listed (and the page itself refuses: ui.require)
page = st.navigation([st.Page(p.script, title=p.title, icon=p.icon, url_path=ui.url_path(p.script),
                              default=(i == 0))
                      for i, p in enumerate(ui.PAGES) if i == 0 or ui.may_open(p.script)])
ui.frame()
page.run()
