"""Upload: bring run history in from a CSV or a Slurm sacct file.

A dry run checks the file and previews it; every error (line, column, value, message) is listed and
downloadable. Nothing is written before the Import button, and a file with any error is never
written. After an import every page shows the new data, and the ledger's audit records who imported
what (shown here). Only a planner (or the single user of local mode) reaches this page's widgets.
"""
import hashlib
from pathlib import Path

import pandas as pd
import streamlit as st

import ui
from lib.dashboard import audit
from lib.ledger.imports import import_runs
from lib.ledger.connection import LedgerError, LedgerLocked, default_timeout_s

ui.frame()
grant = ui.require("import")   # before any widget that could write: a viewer's session stops here

TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "runs_template.csv"

st.title("Upload run history")
if toast := st.session_state.pop("upload_toast", None):
    st.toast(toast, icon="✅")
st.caption("A run CSV (the template below) or `sacct --parsable2` output. Runs are matched by run_id: "
           "re-importing a file changes nothing.")

if TEMPLATE.exists():
    st.download_button("Download the CSV template", TEMPLATE.read_bytes(), file_name="runs_template.csv",
                       mime="text/csv", key="dl_upload_template")

upload = st.file_uploader("Run history file", type=["csv", "txt", "sacct", "psv", "log"], key="upload_file")
c = st.columns(2)
fmt_choice = c[0].radio("Format", ["auto", "csv", "sacct"], key="upload_fmt", horizontal=True,
                        help="auto: .csv files are CSV, anything else sacct")
create_teams = c[1].checkbox("Create teams the ledger does not know", value=False, key="upload_create_teams")

with st.expander("Who imported what, and when", expanded=upload is None):
    try:   # a busy ledger leaves the rest of the page usable: the import below says so itself
        ui.table(audit.recent_writes(ui.db_path()), "audit", "dl_upload_audit", empty="Nothing imported or exported yet.",
                 caption=f"The latest {audit.RECENT_WRITES} writes recorded in the ledger's audit, newest first "
                         "(the command line records its OS user).")
    except LedgerError as exc:
        ui.caption(f"The audit cannot be read just now: {exc}")

if upload is None:
    st.info("Choose a file to check it. Nothing is written until you press Import.")
    st.stop()

data = upload.getvalue()
fmt = fmt_choice if fmt_choice != "auto" else ("csv" if upload.name.lower().endswith(".csv") else "sacct")
key = (hashlib.sha256(data).hexdigest(), fmt, create_teams)
st.text(f"File: {upload.name} · {len(data):,} bytes · read as {fmt}")


def import_or_stop(what: str, status=None, **options):
    """import_runs on the uploaded file; any failure is shown as a message saying nothing was
    written (never a traceback), and the page stops there."""
    try:
        return import_runs(data, fmt=fmt, db=ui.db_path(), create_teams=create_teams,
                           timeout_s=default_timeout_s(), who=ui.who_writes(grant, upload.name), **options)
    except LedgerLocked as exc:
        label = "The ledger is busy"
        text = f"{ui.as_text(exc)}. Nothing was written; try again in a moment."
    except LedgerError as exc:
        label = "The ledger cannot be used"
        text = f"{ui.as_text(exc)}. Nothing was written."
    except Exception as exc:  # noqa: BLE001 - shown on the page, never as a traceback
        label = f"The {what} failed"
        text = f"The {what} failed and nothing was written: {ui.as_text(f'{type(exc).__name__}: {exc}')}"
    if status is not None:
        status.update(label=label, state="error")
    st.error(text)
    st.stop()


check = st.session_state.get("upload_check")
if not check or check["key"] != key:
    with st.spinner("Checking the file (nothing is written)…"):
        report = import_or_stop("check", dry_run=True)
    check = {"key": key, "report": report}
    st.session_state["upload_check"] = check
report = check["report"]

errors = pd.DataFrame(report.errors, columns=["line", "column", "value", "message"])
st.subheader("Check")
c = ui.row(4)
c[0].metric("Rows read", f"{report.rows_read:,}")
c[1].metric("Would insert", f"{report.inserted:,}")
c[2].metric("Would update", f"{report.updated:,}")
c[3].metric("Errors", f"{len(errors):,}")
for note in report.notes or []:
    ui.caption(f"Note: {note}")

if len(errors):
    st.error(f"{len(errors):,} problem(s) found: nothing can be imported until the file is fixed.")
    ui.show_table(errors.astype({"value": "object"}))
    ui.download(errors, "import_errors", "dl_upload_errors", label="Download the error list (CSV)")
else:
    st.success("The file is valid.")

st.subheader("Preview")
if report.preview is not None and len(report.preview):
    ui.show_table(report.preview)
else:
    st.info("Nothing to preview.")

imported = st.session_state.setdefault("upload_imported", {})
done = imported.get(key)
if done:
    st.success(f"Imported: {done['inserted']:,} inserted, {done['updated']:,} updated, "
               f"{done['unchanged']:,} unchanged. Every page now shows the new data.")

# the Import button only when the check says it would change something (after an import, the check runs again)
if len(errors):
    why = "Fix the file first: nothing can be imported while it has errors."
elif not (report.inserted or report.updated or report.teams_created):
    why = ("Nothing to import: " + (f"the ledger already holds every run of this file as it is ({report.unchanged:,} "
                                    "unchanged), so importing it again would change nothing." if report.unchanged
                                    else "the file holds no run to add or change."))
    st.info(why)
else:
    why = None
if st.button("Import", type="primary", key="upload_import", disabled=why is not None):  # why: said above
    with st.status("Importing…", expanded=True) as status:
        bar = st.progress(0.0, text="starting")
        result = import_or_stop("import", status, progress=ui.import_progress(bar))
        if result.errors:
            status.update(label="Not imported", state="error")
            ui.show_table(pd.DataFrame(result.errors, columns=["line", "column", "value", "message"])
                          .astype({"value": "object"}))
            st.stop()
        status.update(label="Imported", state="complete", expanded=False)
    ui.clear_caches()
    imported[key] = {"inserted": result.inserted, "updated": result.updated, "unchanged": result.unchanged}
    st.session_state.pop("upload_check", None)
    st.session_state["upload_toast"] = (f"Imported: {result.inserted:,} inserted, {result.updated:,} updated, "
                                        f"{result.unchanged:,} unchanged")
    st.rerun()
