"""Recovery planner: checkpoint interval, completion-time risk, preemptible vs stable capacity, and
what the gate decides when a run is preempted or breaches its budget.

The interruption rate and restart time come from the ledger (lib.dashboard.recovery_view.recovery_inputs, per team x
capacity type); everything else is lib.planning.preemption (closed forms), lib.planning.simulate (Monte Carlo) and
lib.planning.recovery (the decision), shaped into tables by lib.dashboard.recovery_view. Inputs live in session
state, so they survive reruns and page switches.
"""
import numpy as np
import pandas as pd
import streamlit as st

import ui
from lib.dashboard import lost_work_queries, recovery_figures, recovery_view
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.recovery_view import MIN_LIFETIME_SAMPLES
from lib.planning.interval_curve import expected_or_none
from lib.planning.preemption import compare_capacity
from lib.planning.recovery import scenario_outcomes
from lib.planning.simulate import simulate

f = ui.frame()
SIM_RUNS = [2_000, 5_000, 20_000]
SCENARIO_RUNS = 5_000
EVENTS = {"preemption": "is preempted", "budget-breach": "breaches its budget"}
DEFAULTS = {
    "rp_work_h": 24.0, "rp_gpus": 8, "rp_checkpoint_min": 5.0, "rp_interval_h": 1.0, "rp_mtbf_h": 6.0,
    "rp_restart_min": 10.0, "rp_downtime_min": 0.0, "rp_budget_gpu_hours": 240.0, "rp_deadline_h": 0.0,
    "rp_price_ratio": 0.35, "rp_lifetimes": "exponential", "rp_runs": 20_000,
    "rp_event": "preemption", "rp_sc_budget": 400.0, "rp_sc_spent": 150.0, "rp_sc_total_work": 300.0,
    "rp_sc_progress": 0.5, "rp_sc_checkpoint": "ckpt/step-4500", "rp_sc_ckpt_progress": 0.45,
    "rp_sc_increase": 0.0, "rp_sc_restarts": 0, "rp_sc_max_restarts": 5,
}


# ----------------------------------------------------------------------------- session state
# Widget values vanish when another page runs; a plain copy ("rp_saved") brings them back.
saved = st.session_state.setdefault("rp_saved", {})
for key, default in DEFAULTS.items():
    if key not in st.session_state:
        st.session_state[key] = saved.get(key, default)


@st.cache_data(show_spinner=False, max_entries=64)
def _simulate(work_h, interval_h, checkpoint_h, restart_h, gpus, mtbf_h, lifetimes, downtime_h, runs,
              budget_gpu_hours, wall_limit_h):
    src = {"lifetimes_h": list(lifetimes)} if lifetimes else {"mtbf_h": mtbf_h}
    out = simulate(work_h, interval_h, checkpoint_h, restart_h, gpus, downtime_h=downtime_h, runs=runs, seed=0,
                   budget_gpu_hours=budget_gpu_hours, wall_limit_h=wall_limit_h, return_samples=True, **src)
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def _scenario(situation_items: tuple, runs: int):
    situation = dict(situation_items)
    if situation.get("lifetimes_h") is not None:
        situation["lifetimes_h"] = list(situation["lifetimes_h"])
    return scenario_outcomes(situation, runs=runs, seed=0)


@st.cache_resource(show_spinner=False, max_entries=32)
def _figure(name: str, _builder, *args, **kwargs):
    # plotly figures cost 0.1-0.2 s each to build: kept as objects (never mutated) for reruns;
    # `name` (the builder's qualified name) keys the cache, `_builder` itself is not hashed
    return _builder(*args, **kwargs)


def figure(builder, *args, **kwargs):
    """A cached lib.dashboard.recovery_figures builder(*args, **kwargs)."""
    return _figure(ui.qualified_name(builder), builder, *args, **kwargs)


def _hours(x: float) -> str:
    return f"{x:,.2f} h" if abs(x) < 1e6 else f"{x:.3g} h"


def save_inputs():
    st.session_state["rp_saved"] = {k: st.session_state[k] for k in DEFAULTS if k in st.session_state}


# ----------------------------------------------------------------------------- ledger inputs
data = ui.PageData(recovery_view.recovery_inputs, f)
rates, lifetimes = data["rates"], data["lifetimes"]

st.title("Recovery planner")
ui.caption(f.describe())
st.caption("How often to checkpoint, how likely a job is to overrun its budget, whether preemptible capacity "
           "pays, and what the gate does when a run is preempted or breaches its budget. Hours are wall clock; "
           "GPU-hours are billed accelerator-hours.")

st.subheader("Interruptions and restarts in the ledger")
source = None
if rates.empty:
    st.info("No finished runs with an interruption count in this period — widen the dates or upload history. "
            "The planner below runs on the values you type.")
else:
    teams = [ALL_TEAMS] + sorted(t for t in rates["team"].unique() if t != ALL_TEAMS)
    c = st.columns([2, 2, 3])
    team = c[0].selectbox("Prefill from team", teams, key="rp_src_team")
    caps = sorted(rates.loc[rates["team"] == team, "capacity"].unique()) or ["preemptible"]
    if st.session_state.get("rp_src_capacity") not in caps:
        st.session_state["rp_src_capacity"] = "preemptible" if "preemptible" in caps else caps[0]
    capacity = c[1].radio("Capacity type", caps, key="rp_src_capacity", horizontal=True)
    row = rates[(rates["team"] == team) & (rates["capacity"] == capacity)]
    source = row.iloc[0].to_dict() if len(row) else None
    token = (team, capacity, data.version)
    if source is not None and st.session_state.get("rp_prefilled") != token:
        if pd.notna(source["mtbf_h"]):
            st.session_state["rp_mtbf_h"] = float(source["mtbf_h"])
        st.session_state["rp_restart_min"] = float(source["restart_h"]) * 60.0
        st.session_state["rp_prefilled"] = token
    if source is not None:
        mtbf_text = (f"MTBF {source['mtbf_h']:.3g} h ({source['run_hours']:,.0f} run-hours / "
                     f"{source['interruptions']:,} interruptions)" if pd.notna(source["mtbf_h"]) else
                     f"no interruption in {source['run_hours']:,.0f} run-hours: MTBF left as typed")
        c[2].caption(f"{int(source['runs']):,} finished runs · {mtbf_text} · restart "
                     f"{source['restart_h'] * 60:.1f} min ({source['restart_source']}"
                     f"{', median over %d runs' % source['restart_runs'] if source['restart_source'] == 'ledger' else ''})"
                     f" · {int(source['lifetime_samples']):,} Kaplan-Meier lifetimes "
                     f"({int(source['censored_lifetimes']):,} ended without an interruption)")
    with st.expander("Per team and capacity type"):
        ui.table(rates, "recovery_rates", "dl_rp_rates", empty="No finished runs in this period.",
                 caption="Interruptions: a run's recorded interruption events (the gate's `recover`, or the attempts "
                         "of a requeued job in an sacct import) when it has any, else its interruption count. "
                         "Mean time between interruptions = run time ÷ interruptions. Restart time = the median "
                         "retry GPU-hours per relaunch per GPU, or a default by job size when none is recorded. "
                         "Lifetimes: each run's hours cut into equal gaps, one per interruption plus a last one "
                         "ended by the run's end; Kaplan-Meier counts that last gap (and a run never interrupted) "
                         "as censored, a lifetime at least that long, so lifetimes are not biased short.")

# ----------------------------------------------------------------------------- lost work
st.subheader("Work lost to interruptions")
lost = ui.PageData(lost_work_queries.lost_work, f)
groups = lost["groups"]
if groups.empty:
    st.info("No interrupted attempt recorded in this period: the gate records one with `python -m lib recover`, "
            "and an sacct import of `sacct --duplicates` output brings the attempts of requeued jobs.")
else:
    c = st.columns(3)
    c[0].metric("Lost, measured (GPU-h)", f"{groups['lost_gpu_hours'].sum():,.1f}",
                help="each interrupted attempt's GPU-hours less the work kept at the last checkpoint recorded "
                     "within it (all of it without one)")
    c[1].metric("Lost, expected (GPU-h)", f"{groups['expected_lost_gpu_hours'].sum():,.1f}",
                help="the closed form's expected loss per interruption, for each run's checkpointing, times "
                     "its interrupted attempts")
    c[2].metric("Interrupted attempts", f"{int(groups['attempts'].sum()):,}",
                help=f"{int(groups['with_checkpoint'].sum()):,} after a checkpoint record; "
                     f"{int(groups['from_sacct'].sum()):,} seen only in sacct")
    lost.chart(recovery_figures.lost_work_bars, "groups")
    ui.table(groups, "lost_work", "dl_rp_lost", empty="No interrupted attempts.",
             caption="Measured from the ledger's interruptions in the period (the gate's records and the attempts "
                     "of requeued jobs imported from sacct). Expected: the exact expected-time model's lost work per "
                     "interruption, for each run's checkpoint interval (its pilot's, else the spacing of its "
                     "checkpoint records, else none), checkpoint write, restart and the MTBF above, times the "
                     "run's interrupted attempts.")

# ----------------------------------------------------------------------------- the job
st.subheader("The job")
with st.form("rp_job"):
    c = st.columns(4)
    c[0].number_input("Useful work (hours on these GPUs)", min_value=0.1, key="rp_work_h")
    c[1].number_input("Accelerators (GPUs)", min_value=1, step=1, key="rp_gpus")
    c[2].number_input("Checkpoint write (minutes)", min_value=0.0, key="rp_checkpoint_min")
    c[3].number_input("Checkpoint every (hours of work)", min_value=0.01, key="rp_interval_h")
    c = st.columns(4)
    c[0].number_input("MTBF of the job (hours)", min_value=0.01, format="%.3f", key="rp_mtbf_h")
    c[1].number_input("Restart (minutes)", min_value=0.0, format="%.2f", key="rp_restart_min")
    c[2].number_input("Waiting for capacity per interruption (minutes, not billed)", min_value=0.0,
                      key="rp_downtime_min")
    c[3].number_input("Budget (GPU-hours)", min_value=0.0, key="rp_budget_gpu_hours")
    c = st.columns(4)
    c[0].number_input("Deadline (hours from start; 0: none)", min_value=0.0, key="rp_deadline_h")
    c[1].number_input("Price ratio (preemptible / stable)", min_value=0.0, max_value=10.0, key="rp_price_ratio")
    c[2].radio("Lifetimes", ["exponential", "empirical"], key="rp_lifetimes", horizontal=True,
               format_func={"exponential": "exponential (MTBF)", "empirical": "empirical (ledger)"}.get)
    c[3].selectbox("Simulated runs", SIM_RUNS, key="rp_runs", format_func=lambda n: f"{n:,}")
    st.form_submit_button("Plan", type="primary")

ss = st.session_state
work_h, gpus = float(ss["rp_work_h"]), int(ss["rp_gpus"])
checkpoint_h, interval_h = ss["rp_checkpoint_min"] / 60.0, float(ss["rp_interval_h"])
mtbf_h, restart_h, downtime_h = float(ss["rp_mtbf_h"]), ss["rp_restart_min"] / 60.0, ss["rp_downtime_min"] / 60.0
budget = float(ss["rp_budget_gpu_hours"])
deadline = float(ss["rp_deadline_h"]) or None
sample = ()
if ss["rp_lifetimes"] == "empirical":
    if source is not None and bool(source["enough_lifetimes"]):
        sel = lifetimes[(lifetimes["team"] == source["team"]) & (lifetimes["capacity"] == source["capacity"])]
        sample = tuple(float(v) for v in sel["lifetime_h"])
        ui.caption(f"Kaplan-Meier lifetimes: {len(sample):,} from {source['team']} · {source['capacity']} "
                   f"(mean {np.mean(sample):.3g} h against the MTBF {mtbf_h:.3g} h typed above).")
    else:
        st.warning(f"Fewer than {MIN_LIFETIME_SAMPLES} interruptions for this selection: simulating "
                   "exponential lifetimes from the MTBF instead.")
save_inputs()

# ----------------------------------------------------------------------------- interval
st.subheader("Checkpoint interval")
try:
    curve, optima = recovery_view.interval_frames(work_h, gpus, checkpoint_h, restart_h, mtbf_h, downtime_h)
except (ValueError, OverflowError) as exc:
    st.error(f"Cannot compute the expected time for these inputs: {exc}")
    st.stop()
now_e = expected_or_none(work_h, interval_h, checkpoint_h, restart_h, mtbf_h, downtime_h)
ui.chart(figure(recovery_figures.checkpoint_interval_curve, curve, optima, interval_h,
                 now_e["failure_free_hours"] if now_e else None))
st.caption("Young and Daly are approximations; exact is the Lambert-W minimiser of the per-hour cost. With a "
           "finite amount of work the best whole number of equal segments (W / n) can do slightly better.")
c = st.columns(4)
for col, o in zip(c, optima.iloc[:3].itertuples(index=False)):
    col.metric(f"{o.method.capitalize()} interval", f"{o.interval_h * 60:,.1f} min",
               help=f"expected completion {o.expected_hours:.4g} h")
c[3].metric("Chosen interval: expected completion", _hours(now_e["expected_hours"]) if now_e else "—",
            help="the expected completion time, interruptions and restarts included, at the interval chosen above")

# ----------------------------------------------------------------------------- distribution
st.subheader("Completion time and budget risk")
try:
    sim = _simulate(work_h, interval_h, checkpoint_h, restart_h, gpus, mtbf_h, sample, downtime_h, int(ss["rp_runs"]),
                    budget, deadline)
except (ValueError, OverflowError) as exc:
    st.error(f"Cannot simulate these inputs: {exc}")
    sim = None
if sim:
    c = st.columns(4)
    c[0].metric("P(budget breach)", f"{sim['p_budget_breach']:.1%}",
                help="share of simulated runs whose billed GPU-hours exceed the budget")
    c[1].metric("Completion P50 / P90 (h)",
                f"{sim['completion_hours']['p50']:.3g} / {sim['completion_hours']['p90']:.3g}")
    c[2].metric("Billed GPU-hours (mean)", f"{sim['billed_gpu_hours']['mean']:,.1f}")
    c[3].metric("P(miss deadline)", "—" if sim["p_wall_breach"] is None else f"{sim['p_wall_breach']:.1%}")
    ui.chart(figure(
        recovery_figures.completion_histogram, sim["samples"]["completion_hours"], budget_hours=budget / gpus,
        budget_label=f"{budget:,.0f} GPU-h ÷ {gpus} GPUs", p_breach=sim["p_budget_breach"], wall_limit_h=deadline))
    st.caption("The budget line is the budget in wall-clock hours on these GPUs; waiting for capacity is not billed, "
               "so with a downtime the breach share counts billed GPU-hours, not the line.")

# ----------------------------------------------------------------------------- capacity
st.subheader("Preemptible or stable capacity")
try:
    cmp = compare_capacity(work_h, gpus, float(ss["rp_price_ratio"]), interval_h, checkpoint_h, restart_h, mtbf_h,
                           downtime_h, deadline)
except (ValueError, OverflowError) as exc:
    st.error(f"Cannot compare capacity for these inputs: {exc}")
    cmp = None
if cmp:
    table = recovery_view.capacity_table(cmp)
    c = st.columns(4)
    c[0].metric("Recommendation", cmp["recommendation"])
    c[1].metric("Break-even price ratio", f"{cmp['break_even_ratio']:.3f}")
    c[2].metric("Saving (stable-price GPU-h)", f"{cmp['saving_gpu_hours']:,.1f}")
    c[3].metric("Expected delay (h)", f"{cmp['expected_delay_hours']:.2f}")
    ui.table(table.round({"stable": 3, "preemptible": 3}), "preemptible_vs_stable", "dl_rp_capacity", empty="Nothing to compare.",
             caption="Stable capacity is taken as never interrupted; the same checkpoint interval on both.")
    if cmp["deadline"]:
        d = cmp["deadline"]
        (st.success if d["preemptible_admissible"] else st.warning)(
            f"Deadline {d['deadline_h']:.3g} h: preemptible is {'admissible' if d['preemptible_admissible'] else 'not admissible'}"
            f" (fallback slack {d['fallback_slack_h']:.3g} h); switch to stable when {d['switch_to_stable_when']}.")

# ----------------------------------------------------------------------------- scenario
st.subheader("Scenario: a run is preempted or breaches its budget")
with st.form("rp_scenario"):
    st.radio("Event", list(EVENTS), key="rp_event", horizontal=True,
             format_func=lambda e: f"the run {EVENTS[e]}")
    c = st.columns(4)
    c[0].number_input("Run budget (GPU-hours)", min_value=0.0, key="rp_sc_budget")
    c[1].number_input("Spent so far (GPU-hours)", min_value=0.0, key="rp_sc_spent")
    c[2].number_input("Total work (GPU-hours, failure-free)", min_value=0.0, key="rp_sc_total_work")
    c[3].number_input("Approved budget increase (GPU-hours)", min_value=0.0, key="rp_sc_increase")
    c = st.columns(5)
    c[0].number_input("Progress at the event (0–1)", min_value=0.0, max_value=1.0, key="rp_sc_progress")
    c[1].text_input("Last valid checkpoint (empty: none)", key="rp_sc_checkpoint")
    c[2].number_input("Progress in that checkpoint (0–1)", min_value=0.0, max_value=1.0, key="rp_sc_ckpt_progress")
    c[3].number_input("Relaunches so far", min_value=0, step=1, key="rp_sc_restarts")
    c[4].number_input("Relaunch limit", min_value=0, step=1, key="rp_sc_max_restarts")
    st.form_submit_button("Decide", type="primary")
save_inputs()

situation = {
    "event": ss["rp_event"], "budget_gpu_hours": float(ss["rp_sc_budget"]), "spent_gpu_hours": float(ss["rp_sc_spent"]),
    "gpus": gpus, "total_work_gpu_hours": float(ss["rp_sc_total_work"]),
    "progress_fraction": float(ss["rp_sc_progress"]), "last_valid_checkpoint": ss["rp_sc_checkpoint"].strip() or None,
    "checkpoint_progress_fraction": float(ss["rp_sc_ckpt_progress"]), "restart_h": restart_h,
    "downtime_h": downtime_h, "mtbf_h": mtbf_h, "checkpoint_interval_h": interval_h, "checkpoint_h": checkpoint_h,
    "restarts_so_far": int(ss["rp_sc_restarts"]), "max_restarts": int(ss["rp_sc_max_restarts"]),
    "approved_budget_increase_gpu_hours": float(ss["rp_sc_increase"]),
    "lifetimes_h": sample or None, "wall_limit_h": deadline,
}
try:
    outcome = _scenario(tuple(sorted(situation.items())), SCENARIO_RUNS)
except (ValueError, OverflowError) as exc:
    st.error(f"Cannot decide for these inputs: {exc}")
    st.stop()
decision = outcome["decision"]
show = {"resume": st.success, "restart": st.warning}.get(decision["action"], st.error)
show(f"Decision: {decision['action'].upper()} ({decision['code']})")
ui.caption(decision["message"])
for b in decision["blocking"][1:]:
    ui.caption(f"Also: {b['message']}")

options = recovery_view.options_table(outcome)
ui.chart(figure(recovery_figures.scenario_options, options[options["option"] != "end"]))
ui.table(options.round(3).rename(columns={"mean": "completion_mean_h", "p50": "completion_p50_h", "p90": "completion_p90_h",
                                 "p99": "completion_p99_h"}),
         "recovery_options", "dl_rp_options", empty="No options.",
         caption=f"Expected GPU-hours from the closed form; completion times and breach shares from {SCENARIO_RUNS:,} "
                 "simulated relaunches each. Ending keeps the last valid checkpoint; "
                 "the artifact is incomplete.")
