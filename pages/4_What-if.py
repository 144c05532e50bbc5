"""What-if: try a proposed request against the gate as it stands now, or as the forward plan has it at a
start time, without submitting it.

The form calls lib.ledger.deciding.check_request — exactly what `python -m lib check` calls (with a start
time, lib.ledger.plan.check_request_at, what `check --as-of` calls) — and shows the
decision, every reason with its fix, the raw and calibrated estimate, and the request JSON ready
for `python -m lib submit`. The result stays on screen until the inputs change.
"""
import pandas as pd
import streamlit as st

import ui
from lib.dashboard import estimate_figures, whatif
from lib.gate.access import may
from lib.gate.request import EARLY_STOP_MODES
from lib.gate.terms import CAPACITIES, KINDS, InputError
from lib.ledger.deciding import check_request
from lib.ledger.plan import check_request_at

ui.frame()
grant = ui.require("what-if")   # planners for any team, members for their own teams

st.title("What-if")
st.caption("Nothing is written: this is the check `python -m lib check REQUEST.json` runs, against the ledger now.")

teams = [t for t in ui.all_teams() if may(grant, "what-if", t)]
if not teams:
    st.info("No teams in the ledger — load data/teams.toml (`python -m lib teams`) or upload history first."
            if grant["role"] == "planner" else "None of your teams is in the ledger yet.")
    st.stop()

FIELD_PX, PILOT_FIELD_PX = 200, 165   # rows of fields that wrap on a narrow screen (ui.row): 4 and 5 a row at 1400 px
estimate_from = st.radio("Estimate from", ["pilot", "estimate"], key="wi_estimate_from", horizontal=True,
                         format_func={"pilot": "pilot measurements", "estimate": "a stated estimate"}.get)

with st.form("what_if"):
    c = ui.row(4, width=FIELD_PX)
    c[0].text_input("Run ID", value="whatif-1", key="wi_run_id")
    c[1].selectbox("Team", teams, key="wi_team")
    c[2].selectbox("Kind", KINDS, key="wi_kind")
    c[3].radio("Capacity type", CAPACITIES, key="wi_capacity", horizontal=True)
    c = ui.row(4, width=FIELD_PX)
    c[0].number_input("Accelerators (GPUs)", min_value=1, value=8, step=1, key="wi_gpus")
    c[1].number_input("Memory per accelerator (GB)", min_value=0.0, value=80.0, key="wi_gpu_mem_gb")
    c[2].number_input("Max runtime (hours)", min_value=0.0, value=24.0, key="wi_max_runtime_hours")
    c[3].number_input("Budget (GPU-hours)", min_value=0.0, value=200.0, key="wi_budget_gpu_hours")
    c = ui.row(4, width=FIELD_PX)
    c[0].checkbox("Can checkpoint", value=True, key="wi_checkpoint_supported")
    c[1].number_input("Expected interruptions", min_value=0.0, value=0.0, key="wi_expected_interruptions")
    c[2].text_input("Data snapshot", value="common-crawl-2025-04", key="wi_data_snapshot")
    c[3].number_input("Holdout reads allowed", min_value=0, value=0, step=1, key="wi_holdout_allowance")
    c = st.columns(4)
    c[0].date_input("Start on (UTC; empty: now)", value=None, key="whatif_start_day")
    c[1].time_input("Start at (UTC)", value=None, key="whatif_start_time")

    if estimate_from == "pilot":
        st.markdown("**Pilot measurements**")
        c = ui.row(5, width=PILOT_FIELD_PX)
        c[0].number_input("Steps per second", min_value=0.0, value=2.0, key="wi_steps_per_second")
        c[1].number_input("Worst-case steps/s (0: none)", min_value=0.0, value=0.0,
                          key="wi_worst_case_steps_per_second")
        c[2].number_input("Worst-case share (0–1)", min_value=0.0, max_value=1.0, value=0.0,
                          key="wi_worst_case_share")
        c[3].number_input("Peak memory (GB)", min_value=0.0, value=60.0, key="wi_peak_mem_gb")
        c[4].number_input("Planned steps", min_value=1, value=50_000, step=1000, key="wi_planned_steps")
        c = ui.row(5, width=PILOT_FIELD_PX)
        c[0].number_input("Checkpoint write (s)", min_value=0.0, value=30.0, key="wi_checkpoint_write_s")
        c[1].number_input("Checkpoint every (steps; 0: none)", min_value=0, value=2000, step=100,
                          key="wi_checkpoint_interval_steps")
        c[2].number_input("Evaluation (GPU-hours)", min_value=0.0, value=4.0, key="wi_eval_gpu_hours")
        c[3].number_input("Data-loading stall (0–1)", min_value=0.0, max_value=0.99, value=0.05,
                          key="wi_data_loading_fraction")
        c[4].number_input("Restart (minutes)", min_value=0.0, value=5.0, key="wi_restart_minutes")
        ui.row(1, width=PILOT_FIELD_PX)[0].number_input("Pilot ran on (GPUs; 0: as requested)", min_value=0, value=0,
                                                        step=1, key="wi_pilot_gpus")
    else:
        st.number_input("Estimated GPU-hours", min_value=0.0, value=40.0, key="wi_estimated_gpu_hours")

    st.markdown("**Stop rules** (fixed before the run starts; 0 or empty: none)")
    c = ui.row(4, width=FIELD_PX)
    c[0].number_input("Max wall clock (hours)", min_value=0.0, value=0.0, key="wi_max_wall_clock_hours")
    c[1].number_input("Spend limit (GPU-hours)", min_value=0.0, value=0.0, key="wi_spend_limit_gpu_hours")
    c[2].number_input("Max failed steps", min_value=0, value=0, step=1, key="wi_max_failed_steps")
    c[3].checkbox("Skip full evaluation", value=False, key="wi_skip_full_evaluation")
    c = ui.row(4, width=FIELD_PX)
    c[0].text_input("Early stop: dev metric", value="", key="wi_early_stop_metric")
    c[1].selectbox("Mode", EARLY_STOP_MODES, key="wi_early_stop_mode")
    c[2].number_input("Patience (evaluations)", min_value=0, value=3, step=1, key="wi_early_stop_patience")
    c[3].number_input("Min delta", min_value=0.0, value=0.0, format="%.4f", key="wi_early_stop_min_delta")
    submitted = st.form_submit_button("Check this request", type="primary")

values = {k[3:]: v for k, v in st.session_state.items() if isinstance(k, str) and k.startswith("wi_")}
request = whatif.request_from_form(values)
start = whatif.start_time(st.session_state.get("whatif_start_day"), st.session_state.get("whatif_start_time"))

if submitted:
    ui.require("what-if", request.get("team"))   # the team as sent, not as the select box offered it
    with ui.ledger_errors():
        try:
            decision = (check_request(request, db=ui.db_path()) if start is None
                        else check_request_at(request, at=start, db=ui.db_path()))
        except InputError as exc:
            st.error(ui.as_text(str(exc)))
            st.stop()
    st.session_state["whatif_result"] = {"request": request, "decision": decision, "start": start}

result = st.session_state.get("whatif_result")
if not result or result["request"] != request or result.get("start") != start:
    st.info("Fill in the request and press **Check this request**.")
    st.stop()
if start is not None:
    st.caption(f"Decided as if submitted at {start:%Y-%m-%d %H:%M} UTC, in the gate's line as the forward plan "
               "lays it out: what holds then, the waiting requests the plan starts included "
               "(`python -m lib check --as-of`).")

decision = result["decision"]
state = decision["state"]
{"admit": st.success, "defer": st.warning}.get(state, st.error)(f"Decision: {str(state).upper()}")
in_line = whatif.line_text(decision)
if in_line:
    st.info(ui.as_text(in_line))
st.text(f"run {decision.get('run_id')} · team {decision.get('team')} · kind {decision.get('kind')} · "
        f"policy {decision.get('policy_version')}")
if decision.get("reserved_gpu_hours") is not None:
    st.write(f"Would reserve {decision['reserved_gpu_hours']:,.1f} GPU-hours.")
for note in whatif.note_rows(decision):
    said = note["text"] + (f" — fix: {note['fix']}" if note["fix"] else "")
    if note["warning"]:
        st.warning(ui.as_text(f"Warning: {said}"))
    else:
        ui.caption(f"Note: {said}")

st.subheader("Reasons and fixes")
reasons = pd.DataFrame(whatif.reasons_rows(decision))
ui.table(reasons, "whatif_reasons", "dl_whatif_reasons", empty="No failing check: every limit is met.")

st.subheader("Estimate: itemised raw and calibrated")
est = decision.get("estimate") or {}
if est:
    ui.chart(estimate_figures.estimate_items_figure(est))
    ui.table(pd.DataFrame(whatif.estimate_rows(decision)), "whatif_estimate", "dl_whatif_estimate",
             empty="No estimate.")
    cal = est.get("calibration") or {}
    if cal:
        ui.caption(whatif.calibration_caption(cal))
    ui.glossary("calibrated estimate", "conformal bound", "Tobit", "censored run")
else:
    st.caption("The request is invalid, so no estimate was made.")

st.subheader("Request JSON (ready for `python -m lib submit`)")
text = whatif.request_json(request)
st.code(text, language="json")
st.download_button("Download request.json", text.encode("utf-8"), file_name="request.json",
                   mime="application/json", key="dl_whatif_request")
with st.expander("Full decision JSON"):
    st.json(decision)
