"""Policy replay: edit a proposed policy for one or more teams and see what it changes against the current
policy over a past window — both replayed by the same decide (lib.ledger.replay, exactly what
`python -m lib replay` runs), the proposal's effect first, the recorded decisions after as context; and
the capacity what-if: the smallest pool that meets a planner's target, what it costs, and when the demand
forecast outgrows today's pool. Nothing is written but the audit: the proposal can be downloaded as
teams.toml, and the ledger records who downloaded it. Planners only."""
import datetime as dt

import pandas as pd
import streamlit as st

import ui
from lib.ledger.audit import record_export as record_export_in
from lib.ledger.connection import LedgerError
from lib.dashboard import replay_figures, replay_view, settings
from lib.dashboard.costs import money_text
from lib.gate.terms import CAPACITIES
from lib.ledger.replay import held_p90, kept_file, ledger_teams_file, read_window, replay_ledger
from lib.ledger.teams_file import TeamsFileError
from lib.ledger.teams_proposal import proposal_file, propose
from lib.planning.replay.report import team_table
from lib.planning.replay.rightsizing import right_sizing
from lib.planning.replay.search import sizes_beside, smallest_pool

f = ui.frame()
grant = ui.require("policy")   # planners only; and never on an app that listens beyond loopback unsigned

st.title("Policy replay")
st.caption("Nothing is written: the recorded requests of the window are decided again by the gate, each with "
           "the reservations, month spend, calibration and pool it would have seen — under the proposal, and under "
           "the current policy (the baseline) by the same engine, so the difference is the proposal's alone.")

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


def window_bounds(window) -> tuple[dt.datetime, dt.datetime] | None:
    """[start, end) of the picked dates (both included), None until both are picked."""
    if len(window) != 2:
        return None
    return dt.datetime.combine(window[0], dt.time()), dt.datetime.combine(window[1], dt.time()) + dt.timedelta(days=1)


def on_window(action) -> None:
    """`action` on the picked window's bounds, or say that the window is not picked yet."""
    bounds = window_bounds(st.session_state["pr_window"])
    if bounds is None:
        st.error("Pick the window's first and last day.")
    else:
        action(bounds)


st.date_input("Window (UTC dates, both included; default: the sidebar's period)", value=(f.date_from, f.date_to),
              key="pr_window")
policy_tab, capacity_tab, sizing_tab = st.tabs(["Policy proposal", "Capacity what-if", "Quota right-sizing"])


def record_export(changed_key: str = "pr_changed") -> None:
    """The download is a policy export: the ledger's audit records who took it, and which teams it changes."""
    changed = st.session_state.get(changed_key) or []
    try:
        record_export_in(ui.db_path(), ui.who_writes(grant, "teams.toml"),
                         detail="changes " + (", ".join(changed) if changed else "no team"))
    except LedgerError as exc:
        st.session_state["pr_export_error"] = str(exc)


def download_note(key: str) -> str:
    """What a teams.toml download is: data/teams.toml with only the changed keys written, or why not."""
    note = st.session_state[key]
    return "data/teams.toml with only the changed keys written." if note is None else ui.as_text(note)


def first_of(shown: int, total: int, what: str) -> str | None:
    """A truncated list's caption: how many rows it shows of how many in all."""
    if total > shown:
        return f"The first {shown:,} of {total:,} {what} (the download holds the same {shown:,})."
    return None


def propose_and_replay(bounds) -> None:
    edited = st.session_state["pr_teams"]
    edits = {t: {field: st.session_state[f"pr_{field}|{t}"] for field, _, _ in FIELDS
                 if f"pr_{field}|{t}" in st.session_state} for t in edited}
    levels = {t: float(st.session_state.get(f"pr_level|{t}", DEFAULT_LEVEL)) for t in edited}
    try:
        proposed = propose(policies, edits)
    except TeamsFileError as exc:
        st.error("The proposed policy is not valid:\n\n" + "\n".join(f"- {ui.as_text(p)}" for p in exc.problems))
        return
    changed = [p for p in proposed if p["policy_version"] != policies[p["team"]]["policy_version"]]
    with st.status("Replaying the window's requests…", expanded=True) as status:
        bar = st.progress(0.0, text="reading the ledger")
        with ui.ledger_errors():
            # an unchanged proposal is replayed once: the engine sees it equals the baseline
            result = replay_ledger(ui.db_path(), changed, start=bounds[0], end=bounds[1], levels=levels,
                                   progress=ui.import_progress(bar), keep=True)
        status.update(label=f"Replayed {result['requests']:,} requests", state="complete", expanded=False)
    for p in proposed:
        p["colour"] = policies[p["team"]].get("colour")
    st.session_state["pr_result"] = result
    st.session_state["pr_toml"], st.session_state["pr_toml_note"] = proposal_file(policies, proposed, snapshots, prices)
    st.session_state["pr_changed"] = sorted(p["team"] for p in changed)


def show_effect(result) -> None:
    """The proposal's effect (proposal - baseline) first; the recorded decisions after, as context."""
    c = ui.row(4, width=260)
    c[0].metric("Requests in the window", f"{result['requests']:,}")
    c[1].metric("Admitted: baseline → proposal", f"{result['baseline']['admit']:,} → {result['proposed']['admit']:,}",
                delta=result["proposed"]["admit"] - result["baseline"]["admit"] or None)
    c[2].metric("Deferred: baseline → proposal", f"{result['baseline']['defer']:,} → {result['proposed']['defer']:,}",
                delta=result["proposed"]["defer"] - result["baseline"]["defer"] or None, delta_color="inverse")
    c[3].metric("Decisions the proposal changes", f"{result['proposed_vs_baseline_changed']:,}")
    if result["baseline_is_proposed"]:
        st.info("The proposal is the current policy: it was replayed once, and its difference from the baseline is "
                "zero by construction.")
    diff = replay_view.difference_table(result)
    colours = settings.colours(ui.db_path())
    st.subheader("The proposal's effect, per team (proposal − baseline)")
    for unit in ("decisions", "hours"):
        ui.chart(replay_figures.replay_difference(diff, unit, colours))
    ui.table(diff, "policy_replay_effect", "dl_pr_effect", empty="No replayable requests in this window.",
             caption="Baseline: the current policy replayed over the same window by the same engine. Wait: hours "
                     "from a decision until the request could start — 0 when admitted, to its earliest fit when "
                     "deferred; the mean is over the requests that can start, the P90 over all, empty when it "
                     "falls on requests that waiting never fits.")

    st.subheader("Context: the recorded decisions")
    c = ui.row(4, width=260)
    agree = result["baseline_agreement"]
    c[0].metric("Replayed", f"{result['replayable']:,}")
    c[1].metric("Baseline decides as recorded", "—" if agree is None else f"{agree:.1%}")
    c[2].metric("Same decision as recorded", "—" if result["agreement"] is None else f"{result['agreement']:.1%}")
    c[3].metric("Excluded", f"{result['excluded']['count']:,}")
    ui.caption("Where the baseline disagrees with the record, the record was not decided by this gate under this "
               "policy (imported or generated history, or a policy changed since): read the proposal against the "
               "baseline above, not against the record.")
    ui.table(pd.DataFrame(team_table(result)), "policy_replay_teams", "dl_pr_teams",
             empty="No replayable requests in this window.",
             caption="Recorded, baseline and proposed per team. Reserved and used GPU-hours are those of the admitted "
                     "requests (used: the run's actual, 0 if it never ran); idle share = reserved but unused / "
                     "reserved; a budget breach is an admitted run whose actual exceeded its reservation. Baseline "
                     "and proposed also count the retries the replay sends when it defers a request the record "
                     "admitted (at its earliest fit, inside the window).")
    st.markdown("**Decisions the proposal decides otherwise than recorded**")
    changes = pd.DataFrame(result["changed_requests"])
    if len(changes):
        for col in ("recorded_reasons", "proposed_reasons"):
            changes[col] = changes[col].map(", ".join)
    ui.table(changes, "policy_replay_changes", "dl_pr_changes", empty="Every replayed decision is as recorded.",
             caption=first_of(len(changes), sum(result["changed"].values()), "changed decisions"))
    st.markdown("**Excluded requests**")
    excluded = result["excluded"]
    ui.table(pd.DataFrame(excluded["requests"]), "policy_replay_excluded", "dl_pr_excluded",
             empty="None: every request in the window was replayed.",
             caption=" ".join(filter(None, [
                 first_of(len(excluded["requests"]), excluded["count"], "excluded requests"),
                 "Requests the replay cannot decide as they were decided (no or incomplete request JSON, a team "
                 "without a policy): left out of the agreement, and their recorded effect is kept. Also retries "
                 "the replay did not send because it admitted the run at an earlier request: these have no "
                 "effect."])))
    st.download_button("Download the proposed teams.toml", st.session_state["pr_toml"].encode("utf-8"),
                       file_name="teams.toml", mime="application/toml", key="dl_pr_toml", on_click=record_export)
    if problem := st.session_state.pop("pr_export_error", None):
        st.warning(f"The download was not recorded in the ledger's audit: {ui.as_text(problem)}")
    st.caption(f"{download_note('pr_toml_note')} Load it with `python -m lib teams --file teams.toml` once it has "
               "been reviewed.")


with policy_tab:
    st.multiselect("Teams to change", teams, default=chosen, key="pr_teams")
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
        on_window(propose_and_replay)
    result = st.session_state.get("pr_result")
    if result is None:
        st.info("Edit the policy above and press Replay. The window defaults to the sidebar's period.")
    else:
        show_effect(result)


def search_pool(bounds) -> None:
    capacity, measure = st.session_state["pr_capacity"], st.session_state["pr_target"]
    limit = float(st.session_state["pr_limit"])
    target = {"measure": measure, "limit": limit / 100 if measure == "deferral_share" else limit}
    with st.status("Searching for the smallest pool…", expanded=True) as status:
        bar = st.progress(0.0, text="reading the ledger")
        with ui.ledger_errors():
            window = read_window(ui.db_path(), start=bounds[0], end=bounds[1])
            found = smallest_pool(window, capacity, target, progress=ui.import_progress(bar),
                                  kept=kept_file(ui.db_path()))
            sizes = sizes_beside(found)
            today = window.world.get("pools", {}).get(capacity)
            bar.progress(1.0, text="the sizes around it (replaying any the search did not)")
            rows = replay_view.pool_size_rows(found["sizes"], sorted(set(sizes + ([today] if today is not None else []))))
            tried = replay_view.pool_size_rows(found["sizes"], sorted(found["tried"]))
        done = found["sizes"]
        status.update(label=f"Replayed the window {done.replays:,} times for {len(done.tried):,} pool sizes",
                      state="complete", expanded=False)
    hours = (bounds[1] - bounds[0]).total_seconds() / 3600
    n = found["found"]
    st.session_state["pr_search"] = {
        "capacity": capacity, "target": target, "limit": limit, "found": n, "ceiling": found["ceiling"],
        "today": today, "rows": rows, "tried": tried,
        "cost": replay_view.pool_cost(n, capacity, hours, ui.db_path()) if n is not None else None,
        "today_cost": replay_view.pool_cost(today, capacity, hours, ui.db_path()) if today is not None else None}


def show_search(s) -> None:
    unit = "%" if s["target"]["measure"] == "deferral_share" else " h"
    what = replay_view.TARGETS[s["target"]["measure"]].split(" at most")[0]
    c = ui.row(3, width=300)
    if s["found"] is None:
        st.warning(f"No {s['capacity']} pool up to {s['ceiling']:,} accelerators (every quota together) meets "
                   f"{what} ≤ {s['limit']:g}{unit}: the quotas, budgets or caps stand in the way, not the pool.")
    else:
        c[0].metric(f"Smallest {s['capacity']} pool meeting {what} ≤ {s['limit']:g}{unit}", f"{s['found']:,} GPUs")
    c[1].metric(f"Today's {s['capacity']} pool", "none configured" if s["today"] is None else f"{s['today']:,} GPUs")
    if s["cost"] is not None:
        c[2].metric("Its cost per week", money_text(s["cost"]["per_week"], s["cost"]["currency"]),
                    help=f"{s['found']:,} × 168 h × {s['cost']['currency']} {s['cost']['per_gpu_hour']:,.2f} per "
                         f"GPU-hour; over the window {money_text(s['cost']['per_window'], s['cost']['currency'], whole=True)}")
    elif s["found"] is not None:
        c[2].metric("Its cost per week", "no price set")
    ui.chart(replay_figures.pool_measures(s["tried"], s["found"], s["today"]))
    ui.table(s["rows"], "pool_what_if", "dl_pr_pool",
             empty="No pool meets the target: nothing to show around it.",
             caption="Admits, deferrals and wait per team with the pool sizes around the one found (and today's), "
                     "the window replayed under the current policy with that many accelerators: steps of about a "
                     "tenth either side, or the size nearest a step that the search already replayed.")
    with st.expander("Every pool size the search replayed"):
        ui.table(s["tried"], "pool_search", "dl_pr_tried", empty="None.")


with capacity_tab:
    st.caption("How many accelerators does the cluster need? The window is replayed under the current policy with "
               "N accelerators in one pool — the gate's own pool check (cluster-capacity) — and the smallest N "
               "meeting the target is found by bisection.")
    c = st.columns(3)
    c[0].selectbox("Pool (capacity type)", CAPACITIES, key="pr_capacity")
    c[1].selectbox("Target", list(replay_view.TARGETS), format_func=replay_view.TARGETS.get, key="pr_target")
    c[2].number_input("at most", min_value=0.0, value=24.0 if st.session_state.get("pr_target", "p90_wait_hours")
                      == "p90_wait_hours" else 5.0, step=1.0, key="pr_limit")
    search = st.button("Find the smallest pool", key="pr_search_go")
    if search:
        on_window(search_pool)
    if st.session_state.get("pr_search") is not None:
        show_search(st.session_state["pr_search"])
    if st.button("When does the 26-week demand forecast outgrow today's pool?", key="pr_outgrow_go"):
        capacity = st.session_state["pr_capacity"]
        with ui.ledger_errors():
            today = replay_view.pools_today(ui.db_path()).get(capacity)
            size = today if today is not None else sum(p["reserved_gpus"] for p in policies.values())
            with st.spinner("Forecasting 26 weeks of demand…"):
                st.session_state["pr_outgrow"] = (capacity, today, replay_view.forecast_outgrows(size, ui.db_path()))
    if st.session_state.get("pr_outgrow") is not None:
        capacity, today, out = st.session_state["pr_outgrow"]
        against = (f"today's {capacity} pool ({today:,} GPUs)" if today is not None
                   else f"the quotas together ({out['pool_gpu_hours_per_week'] / 168:,.0f} GPUs; no {capacity} pool is set)")
        if out["week_start"] is None:
            st.success(f"Within {out['weeks']} weeks the demand forecast's P90 (every team added up) stays within {against}.")
        else:
            st.warning(f"Week of {out['week_start']:%Y-%m-%d}: the demand forecast's P90, every team added up, "
                       f"{out['p90_gpu_hours']:,.0f} GPU-hours, first exceeds {against}: "
                       f"{out['pool_gpu_hours_per_week']:,.0f} GPU-hours a week.")


def recommend_cuts(bounds) -> None:
    with st.status("Replaying each team's cut…", expanded=True) as status:
        bar = st.progress(0.0, text="reading the ledger")
        with ui.ledger_errors():
            window = read_window(ui.db_path(), start=bounds[0], end=bounds[1])
            held = held_p90(ui.db_path(), start=bounds[0], end=bounds[1])
            sizing = replay_view.sizing_tables(right_sizing(window, held, progress=ui.import_progress(bar),
                                                            kept=kept_file(ui.db_path())))
        status.update(label=f"Replayed {len(sizing['edits']):,} cut(s) against the baseline", state="complete",
                      expanded=False)
    proposed = propose(policies, sizing["edits"])
    for p in proposed:
        p["colour"] = policies[p["team"]].get("colour")
    st.session_state["pr_sizing"] = sizing
    st.session_state["pr_sizing_toml"], st.session_state["pr_sizing_note"] = proposal_file(policies, proposed,
                                                                                          snapshots, prices)
    st.session_state["pr_sizing_changed"] = sorted(sizing["edits"])


with sizing_tab:
    st.caption("Which quotas can be cut, and what would that cost the teams? Each team could give back its quota "
               "less the accelerators it held at its 90th percentile over the window (sampled hourly; never below "
               "its retraining set-aside). Each cut is proved by replaying the window with that team's quota cut "
               "and every other policy as it is, against the baseline (the current policy, same engine).")
    if st.button("Recommend quota cuts", key="pr_sizing_go"):
        on_window(recommend_cuts)
    sizing = st.session_state.get("pr_sizing")
    if sizing is not None:
        ui.table(sizing["rows"], "quota_right_sizing", "dl_pr_sizing", empty="No team policies.",
                 caption="Per team: quota, P90 held, accelerators it could give back, and the replay of that cut — "
                         "the team's admits, deferrals and P90 wait, and the other teams' admits, baseline vs with "
                         "the cut.")
        st.markdown("**The proof: every team's measures in the replay of each cut**")
        ui.table(sizing["proof"], "quota_cut_proof", "dl_pr_sizing_proof",
                 empty="No team holds less than its quota at its 90th percentile: nothing to give back.")
        if sizing["edits"]:
            st.download_button("Download the cut as a teams.toml proposal",
                               st.session_state["pr_sizing_toml"].encode("utf-8"), file_name="teams.toml",
                               mime="application/toml", key="dl_pr_sizing_toml", on_click=record_export,
                               args=("pr_sizing_changed",))
            st.caption(download_note("pr_sizing_note"))
