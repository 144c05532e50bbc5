"""The dashboard's UI kit. Pages call it as `import ui`, then `ui.frame()`, `ui.PageData(...)`,
`ui.table(...)`: the names they use are gathered here; each lives in one module of this package.

- ui.pages: the page list (scripts, titles, icons, the action each needs), read by app.py and the tests
- ui.page_frame: the shared frame every page draws first (page config, ledger and demo history on
  first start, the sidebar filters, also kept in the URL)
- ui.demo: the ledger and its demo history on a session's first view
- ui.data: cached page data and figures; a locked or unreadable ledger as a message
- ui.access: who is asking and what they may do (sign-in, roles, write refusal)
- ui.tables: the app's one data grid and tables with CSV downloads
- ui.layout: rows of fixed-width cells that wrap on a narrow screen (metrics, form fields)
- ui.text: user text shown as typed, messages, the glossary, progress

It is, with app.py and pages/, the only code that imports Streamlit; lib/ never does, and no module
of lib/ imports ui (tests/test_layers.py checks both).
"""
from ui.access import may_open, require, sign_in_screen, signed_out, who, who_writes, write_refusal
from ui.data import (CACHE_TTL_S, PageData, all_teams, chart, clear_caches, data_version, db_path, ledger_errors,
                     ledger_is_empty, now_minute, qualified_name, cached_sidebar_options)
from ui.layout import row
from ui.page_frame import frame
from ui.pages import PAGES, page_script, url_path
from ui.tables import WRAP_CHARS, download, show_table, table
from ui.text import WORD_JOINER, as_text, show_budget_outlook, caption, glossary, import_progress
