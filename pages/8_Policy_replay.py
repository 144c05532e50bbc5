"""Policy replay: edit a proposed policy for one or more teams and see what the gate would have done over a
past window — the recorded requests decided again, in time order, by the same decide (lib.ledger.replay,
exactly what `python -m lib replay` runs). Nothing is written but the audit: the proposal can be downloaded as
teams.toml, and the ledger records who downloaded it. Planners only."""
import datetime as dt

import pandas as pd
import streamlit as st

import ui
from lib.ledger.audit import record_export as record_export_in
from lib.ledger.connection import LedgerError
from lib.ledger.replay import ledger_teams_file, policy_to_toml, propose, replay_ledger
from lib.ledger.teams_file import TeamsFileError
from lib.planning.replay_report import team_table

f = ui.frame()
grant = ui.require("policy")   # planners only; and never on an app that listens beyond loopback unsigned

st.title("Policy replay")
st.caption("Nothing is written: the recorded requests of the window are decided again by the gate, each with "
           "the reservations, month spend and calibration it would have seen under the proposed policy.")

with ui.ledger_errors():
    policies, snapshots, prices = ledger_teams_file(ui.db_path())
if not policies:
    st.info("No team policies in the ledger — load data/teams.toml (`python -m lib teams`) first.")
    st.stop()

# (policy field, label, integer?) the form edits; the rest of each policy stays as it is
FIELDS = [("reserved_gpus", "Quota (reserved GPUs)", True),
          ("retraining_reserved_gpus", "Retraining set-aside (GPUs)", True),
          ("monthly_budget_gpu_hours", "Monthly budget (GPU-hours)", False),
          ("max_gpus_per_job", "Per-job cap: GPUs", True),
          ("max_gpu_mem_gb", "Per-job cap: memory per GPU (GB)", False),
          ("max_runtime_hours", "Per-job cap: runtime (hours)", False),
          ("pilot_required_above_gpu_hours", "Pilot required above (GPU-hours)", False)]
DEFAULT_LEVEL = 0.9

teams = sorted(policies)
chosen = [t for t in f.teams if t in policies][:4] or teams[:1]
today = dt.datetime.now(dt.timezone.utc).date()

c = st.columns(2)
c[0].multiselect("Teams to change", teams, default=chosen, key="pr_teams")
c[1].date_input("Window (UTC dates, both included)", value=(today - dt.timedelta(weeks=4), today),
                key="pr_window")
with st.form("policy_replay"):
    for team in st.session_state["pr_teams"]:
        with st.expander(ui.as_text(team), expanded=True):
            cols = st.columns(4)
            for i, (field, label, whole) in enumerate(FIELDS):
                value = policies[team][field]
                cols[i % 4].number_input(label, min_value=0 if whole else 0.0, step=1 if whole else 1.0,
                                         value=int(value) if whole else float(value), key=f"pr_{field}|{team}")
            cols[len(FIELDS) % 4].number_input("Calibration level", min_value=0.5, max_value=0.99, step=0.01,
                                               value=DEFAULT_LEVEL, key=f"pr_level|{team}")
    run = st.form_submit_button("Replay", type="primary")

if run:
    edited = st.session_state["pr_teams"]
    edits = {t: {field: st.session_state[f"pr_{field}|{t}"] for field, _, _ in FIELDS
                 if f"pr_{field}|{t}" in st.session_state} for t in edited}
    levels = {t: float(st.session_state.get(f"pr_level|{t}", DEFAULT_LEVEL)) for t in edited}
    window = st.session_state["pr_window"]
    try:
        proposed = propose(policies, edits)
    except TeamsFileError as exc:
        st.error("The proposed policy is not valid:\n\n" + "\n".join(f"- {ui.as_text(p)}" for p in exc.problems))
        st.stop()
    if len(window) != 2:
        st.error("Pick the window's first and last day.")
        st.stop()
    start = dt.datetime.combine(window[0], dt.time())
    end = dt.datetime.combine(window[1], dt.time()) + dt.timedelta(days=1)
    changed = [p for p in proposed if p["policy_version"] != policies[p["team"]]["policy_version"]]
    with st.status("Replaying the window's requests…", expanded=True) as status:
        bar = st.progress(0.0, text="reading the ledger")
        with ui.ledger_errors():
            result = replay_ledger(ui.db_path(), changed, start=start, end=end, levels=levels,
                                   progress=ui.import_progress(bar))
        status.update(label=f"Replayed {result['requests']:,} requests", state="complete", expanded=False)
    for p in proposed:
        p["colour"] = policies[p["team"]].get("colour")
    st.session_state["pr_result"] = result
    st.session_state["pr_toml"] = policy_to_toml(proposed, snapshots, prices)
    st.session_state["pr_changed"] = sorted(p["team"] for p in changed)

result = st.session_state.get("pr_result")
if result is None:
    st.info("Edit the policy above and press Replay. The default window is the last 4 weeks.")
    st.stop()

c = ui.row(4)
c[0].metric("Requests in the window", f"{result['requests']:,}")
c[1].metric("Replayed", f"{result['replayable']:,}")
c[2].metric("Same decision as recorded", "—" if result["agreement"] is None else f"{result['agreement']:.1%}")
c[3].metric("Excluded", f"{result['excluded']['count']:,}")
c = ui.row(2, width=300)
c[0].metric("Admitted: recorded → proposed", f"{result['recorded']['admit']:,} → {result['proposed']['admit']:,}")
c[1].metric("Deferred: recorded → proposed", f"{result['recorded']['defer']:,} → {result['proposed']['defer']:,}")

st.subheader("Per team, recorded vs proposed")
ui.table(pd.DataFrame(team_table(result)), "policy_replay_teams", "dl_pr_teams",
         empty="No replayable requests in this window.",
         caption="Reserved and used GPU-hours are those of the admitted requests (used: the run's actual, 0 if it "
                 "never ran); idle share = reserved but unused / reserved; a budget breach is an admitted run "
                 "whose actual exceeded its reservation; wait: hours from a deferral to its earliest fit.")

st.subheader("Decisions that change")
changes = pd.DataFrame(result["changed_requests"])
if len(changes):
    for col in ("recorded_reasons", "proposed_reasons"):
        changes[col] = changes[col].map(", ".join)
ui.table(changes, "policy_replay_changes", "dl_pr_changes", empty="Every replayed decision is as recorded.",
         caption=(f"The first {len(changes):,} of {sum(result['changed'].values()):,}." if len(changes) else None))

st.subheader("Excluded requests")
ui.table(pd.DataFrame(result["excluded"]["requests"]), "policy_replay_excluded", "dl_pr_excluded",
         empty="None: every request in the window was replayed.",
         caption="Requests the replay cannot decide as they were decided (no or incomplete request JSON, a team "
                 "without a policy); they are left out of the agreement and keep their recorded effect.")



def record_export() -> None:
    """The download is a policy export: the ledger's audit records who took it, and which teams it changes."""
    changed = st.session_state.get("pr_changed") or []
    try:
        record_export_in(ui.db_path(), ui.who_writes(grant, "teams.toml"),
                         detail="changes " + (", ".join(changed) if changed else "no team"))
    except LedgerError as exc:
        st.session_state["pr_export_error"] = str(exc)


st.download_button("Download the proposed teams.toml", st.session_state["pr_toml"].encode("utf-8"),
                   file_name="teams.toml", mime="application/toml", key="dl_pr_toml", on_click=record_export)
if problem := st.session_state.pop("pr_export_error", None):
    st.warning(f"The download was not recorded in the ledger's audit: {ui.as_text(problem)}")
st.caption("Load it with `python -m lib teams --file teams.toml` once it has been reviewed.")
