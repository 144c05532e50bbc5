"""The demo's requests decided by the gate as they are generated, in time order: each request
`runs.generate` drew is decided by lib.gate.admission.decide under the state the policy replay gives
it (lib.planning.replay.world.ReplayWorld: the reservations held then, the month's spend, the
calibration and interruption rate of the runs finished by then), so replaying the demo under its
own policy decides it again as recorded. An admitted run holds its accelerators from its decision
for the reservation it booked (lib.ledger.recording.booked_reservation) or until it ends, and spends
its actual GPU-hours when it ends; a deferred one holds and spends nothing, and is submitted again
as the gate's fix says (RESUBMIT_AFTER_H): when it fits, next month, with the budget raised, with a
pilot, on more accelerators. Requests drawn with a flaw (DEFER_WEIGHTS) are decided too; one the gate
admits after all was never submitted. Run in a thread while DuckDB inserts the chunk before.
"""
from __future__ import annotations

import heapq
import math
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from lib.gate.admission import decide
from lib.gate.calibration import DEFAULT_LEVEL
from lib.gate.capacity import MONTH_CURES, WAIT_CURES, fit_for_reasons
from lib.gate.terms import CALIBRATION_STOPS, CAPACITIES, CENSORED_STOPS, KINDS, finite_number
from lib.ledger.demo.deferrals import flawed_request
from lib.ledger.demo.insert import run_ids
from lib.ledger.demo.parameters import (DEFER_CODES, EXACT_DAYS, GPU_CHOICES, MAX_ATTEMPTS, RESUBMIT_AFTER_H, SOURCES,
                                        STOPS)
from lib.ledger.demo.runs import ENDING_COLUMNS, ending
from lib.ledger.recording import booked_reservation, canonical_json, estimate_items
from lib.planning.replay.passes import AUTO_EXACT_UP_TO
from lib.planning.replay.world import ReplayWorld

_US = np.timedelta64(1, "us")
_FIXED = {"budget", "no-pilot", "runtime-cap"}   # deferrals a run is resubmitted changed for
_CALIBRATING = {STOPS.index(s) for s in CALIBRATION_STOPS}
_CENSORED = {STOPS.index(s) for s in CENSORED_STOPS}
_EST_COLUMNS = ("e_comp", "e_ckpt", "e_eval", "e_data", "e_rst")


def new_world(snapshots: list[dict], runs: int, now: datetime) -> ReplayWorld:
    """The replay world a demo build of `runs` runs up to `now` starts from: nothing held, spent or
    finished yet. Over the last EXACT_DAYS its calibration is refreshed as the replay of the build's
    last weeks refreshes it (lib.planning.replay.passes, "auto"); before, once a month (`_MonthlyBefore`)."""
    snaps: dict = {}
    for s in snapshots:
        snaps.setdefault(s["team"], set()).add(s["snapshot"])
    world = ReplayWorld({"holdings": [], "ends": [], "runs": {}, "snapshots": snaps},
                       refresh="exact" if runs <= AUTO_EXACT_UP_TO else "daily")
    world.cals = _MonthlyBefore(world.cals, now - timedelta(days=EXACT_DAYS))
    return world


class _MonthlyBefore:
    """Calibration per request: as `cals` (lib.planning.replay.history.Calibrations) gives it from
    `exact_from` on; before, once per (team, kind, level, calendar month), at its first request (a
    calibration costs milliseconds, and the older history is replayed less often)."""

    def __init__(self, cals, exact_from: datetime):
        self.cals, self.exact_from, self.cache = cals, exact_from, {}

    @property
    def computed(self) -> int:
        return self.cals.computed

    def get(self, team: str, kind: str, level: float, now: datetime):
        if now >= self.exact_from:
            return self.cals.get(team, kind, level, now)
        key, month = (team, kind, level), (now.year, now.month)
        hit = self.cache.get(key)
        if hit is None or hit[0] != month:
            hit = self.cache[key] = (month, self.cals.get(team, kind, level, now))
        return hit[1]


def _at(now: datetime, hours: float) -> datetime:
    """now + hours, to the microsecond (as the ledger stores it)."""
    return now + timedelta(microseconds=round(hours * 3.6e9))


class _Runs:
    """The chunk's requests as Python values, with what the gate's fixes change."""

    def __init__(self, data: dict, teams: list[dict], snapshots: list[dict]):
        r, p = data["runs"], data["pilots"]
        self.n = len(r)
        self.ids = run_ids(data, np.arange(self.n))
        self.col = {k: r[k].tolist() for k in ("team_i", "kind_i", "cap_i", "gpu_mem_gb", "max_rt", "ckpt_ok",
                                               "exp_int", "skip_eval", "allow", "est", "snap_u", "t_sub",
                                               "late", "restart_h", "open", "checks")}
        self.gpus, self.budget, self.pilot = r["gpus"].tolist(), r["budget"].tolist(), r["pilot"].tolist()
        self.never = r["never"].tolist()
        self.pilots = {k: p[k].tolist() for k in ("p_gpus", "sps", "wc_sps", "wc_share", "peak_mem", "ckpt_s",
                                                  "steps", "interval", "eval_gh", "dl_frac", "restart_min")}
        self.drawn = {k: r[k].to_numpy().copy() for k in ENDING_COLUMNS}
        per_team = {t["team"]: [s["snapshot"] for s in snapshots if s["team"] in (None, t["team"])]
                    or [f"{t['team']}-data"] for t in teams}
        names = data["teams"]
        self.snap = [per_team[names[t]][int(u * len(per_team[names[t]]))]
                     for t, u in zip(self.col["team_i"], self.col["snap_u"])]
        self.changed = np.zeros(self.n, bool)
        self.work = np.ones(self.n)   # the share of its drawn work a run kept (halved: fewer steps)

    def pilot_of(self, i: int) -> dict:
        p = self.pilots
        return {"gpus": p["p_gpus"][i], "steps_per_second": p["sps"][i], "worst_case_steps_per_second": p["wc_sps"][i],
                "worst_case_share": p["wc_share"][i], "peak_mem_gb": p["peak_mem"][i],
                "checkpoint_write_s": p["ckpt_s"][i], "planned_steps": p["steps"][i],
                "checkpoint_interval_steps": p["interval"][i], "eval_gpu_hours": p["eval_gh"][i],
                "data_loading_fraction": p["dl_frac"][i], "restart_minutes": p["restart_min"][i]}

    def request(self, i: int, team: str, at: datetime) -> dict:
        """Run i's request as its team submits it at `at` (a submit's full request)."""
        c = self.col
        req = {"run_id": self.ids[i], "team": team, "kind": KINDS[c["kind_i"][i]], "gpus": int(self.gpus[i]),
               "gpu_mem_gb": c["gpu_mem_gb"][i], "max_runtime_hours": c["max_rt"][i],
               "budget_gpu_hours": self.budget[i], "capacity": CAPACITIES[c["cap_i"][i]],
               "data_snapshot": self.snap[i], "checkpoint_supported": c["ckpt_ok"][i],
               # a run that cannot checkpoint states no interruptions: the gate would defer it
               "expected_interruptions": c["exp_int"][i] if c["ckpt_ok"][i] else 0.0,
               "skip_full_evaluation": c["skip_eval"][i], "holdout_allowance": int(c["allow"][i]),
               "submitted_at": at.isoformat(timespec="seconds")}
        if self.pilot[i]:
            req["pilot"] = self.pilot_of(i)
        else:
            req["estimated_gpu_hours"] = c["est"][i]
        return req


def decide_chunk(data: dict, teams: list[dict], snapshots: list[dict], now: datetime, world: ReplayWorld,
                 seed, progress=None) -> None:
    """Decide the chunk's requests in time order under `world` (carried from chunk to chunk), and
    replace data["runs"] and data["pilots"] by the admitted runs and their pilots, with
    data["decisions"] every decision made (admits and deferrals) and data["active"] the runs not
    ended by `now`."""
    rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), 7])
    R = _Runs(data, teams, snapshots)
    col = R.col
    drawn = ending(R.drawn, np.array(R.budget, float), np.array(R.gpus))
    events = [(_at(now, t), 0, i) for i, t in enumerate(col["t_sub"])]
    d = data["deferred"]
    first = int(data["runs"]["i"].iloc[0]) if R.n else 0
    flaws = list(zip(d["j"].tolist(), d["later"].tolist(), d["i"].tolist(), d["team_i"].tolist(),
                     d["kind_i"].tolist(), d["c_lo"].tolist(), d["c_hi"].tolist(), d["d_time"].tolist(),
                     d["judged"].tolist())) if len(d) else []
    events += [(_at(now, f[7]), 1, k) for k, f in enumerate(flaws)]
    heapq.heapify(events)
    rows: list = []
    admitted: list = [None] * R.n
    booked: list = [None] * R.n
    raw: list = [None] * R.n
    items: dict = {}
    attempts = [0] * R.n
    pilot_from: list = [None] * R.n

    def record(at, req, decision):
        est = decision["estimate"] or {}
        rows.append((at, req["run_id"], req["team"], req["kind"], decision["state"],
                     [r["code"] for r in decision["reasons"]], finite_number(est.get("judged_gpu_hours")),
                     finite_number(decision["reserved_gpu_hours"]), decision["policy_version"],
                     canonical_json(req), canonical_json(decision)))

    done, of = 0, len(events)
    while events:
        at, flawed, i = heapq.heappop(events)
        done += 1
        if progress is not None and done % 2000 == 0:
            progress(min(done, of), of)
        world.advance(at)
        if flawed:
            j, later, ri, ti, ki, lo, hi, _, judged = flaws[i]
            policy = teams[ti]
            codes = [DEFER_CODES[lo]] + ([DEFER_CODES[hi]] if hi >= 0 else [])
            rid = R.ids[ri - first] if later else f"{policy['team']}-deferred-{j:07d}"
            gpus = R.gpus[ri - first] if later else int(GPU_CHOICES[j % 5])
            req = flawed_request(policy, snapshots, rid, KINDS[ki], gpus, judged, codes, at, (j * 0.6180339887) % 1.0)
            holders = world.held(policy["team"], at)
            decision = decide(req, policy, world.state(policy["team"], req["kind"], policy, DEFAULT_LEVEL, at, holders))
            if decision["state"] == "defer":   # one the gate admits after all was never submitted
                record(at, req, decision)
            continue
        policy = teams[col["team_i"][i]]
        team = policy["team"]
        req = R.request(i, team, at)
        holders = world.held(team, at)
        state = world.state(team, req["kind"], policy, DEFAULT_LEVEL, at, holders)
        decision = decide(req, policy, state)
        if not attempts[i] and col["checks"][i] and decision["state"] == "defer" \
                and _fix(R, i, policy, decision, rng) is not None:
            # most teams check a request on the what-if form first and submit it as its fixes say
            req = R.request(i, team, at)
            decision = decide(req, policy, state)
        if R.pilot[i] and pilot_from[i] is None:
            pilot_from[i] = at
        record(at, req, decision)
        attempts[i] += 1
        if decision["state"] == "admit":
            admitted[i], booked[i] = at, booked_reservation(req, decision, at)
            raw[i] = decision["estimate"]["raw_gpu_hours"]
            if R.pilot[i]:
                items[i] = estimate_items(decision["estimate"]["items_gpu_hours"])
            if raw[i] != col["est"][i] and col["est"][i] > 0:
                # what it needs is drawn against its estimate: a pilot's estimate is the gate's
                _scale_work(R, i, raw[i] / col["est"][i])
            if R.changed[i]:
                _settle(drawn, R, i)
            world.admit(req, _run_record(R, i, drawn, at, booked[i], raw[i], now), decision, at)
        elif decision["state"] == "defer" and attempts[i] < MAX_ATTEMPTS:
            again = _resubmit(R, i, policy, decision, at, holders, rng)
            if again is not None:
                heapq.heappush(events, (again, 0, i))
    _finish(data, R, admitted, booked, raw, items, pilot_from, now)
    data["decisions"] = pd.DataFrame(rows, columns=["decided_at", "run_id", "team", "kind", "state", "reason_codes",
                                                    "judged_gpu_hours", "reserved_gpu_hours", "policy_version",
                                                    "request_json", "decision_json"])


def _scale_work(R: _Runs, i: int, factor: float) -> None:
    """Run i's estimate and what it needs (its drawn actual and items) times `factor`."""
    R.col["est"][i] *= factor
    for k in ("full", "drawn_actual", "a_ckpt", "a_eval", "a_lost", "a_retry"):
        R.drawn[k][i] *= factor
    R.changed[i] = True


def _settle(drawn: dict, R: _Runs, i: int) -> None:
    """Run i's ending in `drawn` settled again for its changed budget and accelerators."""
    one = ending({k: v[i:i + 1] for k, v in R.drawn.items()}, np.array([R.budget[i]], float), np.array([R.gpus[i]]))
    for k, v in one.items():
        drawn[k][i] = v[0]


def _run_record(R: _Runs, i: int, drawn: dict, at: datetime, held: dict, raw: float, now: datetime) -> dict:
    """Run i admitted at `at` as the replay world knows it: its end (None while it runs at `now`),
    actual GPU-hours, calibration row and interruptions (lib.ledger.replay's rules)."""
    col = R.col
    actual, stop = float(drawn["actual"][i]), int(drawn["stop_i"][i])
    if R.never[i]:
        end = held["reserved_until"]
    else:
        wall = actual / R.gpus[i] + int(drawn["restarts"][i]) * col["restart_h"][i]
        end = at + timedelta(hours=col["late"][i] + wall)
    if col["open"][i] or end > now:
        end = None
    preemptible = CAPACITIES[col["cap_i"][i]] == "preemptible"
    return {"kind": KINDS[col["kind_i"][i]], "ended_at": end, "admitted_at": at, "actual_gpu_hours": actual,
            "calibration": (raw, stop in _CENSORED) if raw > 0 and stop in _CALIBRATING else None,
            "interruptions": int(drawn["interrupts"][i]) if preemptible and actual > 0 else None}


def _fix(R: _Runs, i: int, policy: dict, decision: dict, rng) -> float | None:
    """Change run i's request as the fixes of its deferral say (a budget raised to the judged estimate,
    a pilot, more accelerators); the hours that takes, or None when the deferral has a reason no
    change of the run fixes (waiting may still)."""
    codes = {r["code"] for r in decision["reasons"]}
    if codes - WAIT_CURES - MONTH_CURES - _FIXED:
        return None
    after = 0.0
    if "budget" in codes:
        R.budget[i] = math.ceil(decision["estimate"]["judged_gpu_hours"] * rng.uniform(1.05, 1.3) * 10) / 10
        R.changed[i] = True
        after = max(after, rng.uniform(*RESUBMIT_AFTER_H["budget"]))
    if "no-pilot" in codes:
        R.pilot[i] = True
        after = max(after, rng.uniform(*RESUBMIT_AFTER_H["no-pilot"]))
    if "runtime-cap" in codes:
        if R.gpus[i] < policy["max_gpus_per_job"]:
            R.gpus[i] = int(min(policy["max_gpus_per_job"], R.gpus[i] * 2))
        else:   # as many accelerators as the cap allows already: half the steps
            R.work[i] /= 2
            R.pilots["steps"][i] = max(1, R.pilots["steps"][i] // 2)
            _scale_work(R, i, 0.5)
        R.changed[i] = True
        after = max(after, rng.uniform(*RESUBMIT_AFTER_H["runtime-cap"]))
    return after


def _resubmit(R: _Runs, i: int, policy: dict, decision: dict, at: datetime, holders, rng) -> datetime | None:
    """When run i, deferred at `at`, is submitted again, changed as the gate's fix says; None: given up."""
    codes = {r["code"] for r in decision["reasons"]}
    kind = KINDS[R.col["kind_i"][i]]
    after = _fix(R, i, policy, decision, rng)
    if after is None:
        return None
    if codes & (WAIT_CURES | MONTH_CURES):
        fit, _ = fit_for_reasons(at, codes & (WAIT_CURES | MONTH_CURES), kind, policy["reserved_gpus"],
                                 policy["retraining_reserved_gpus"], holders, R.gpus[i])
        if fit is None:   # more than the quota leaves it: as many as it leaves
            quota = policy["reserved_gpus"] - (0 if kind == "retraining" else policy["retraining_reserved_gpus"])
            if quota < 1 or quota >= R.gpus[i]:
                return None
            R.gpus[i], R.changed[i] = int(quota), True
            fit = at
        wait = RESUBMIT_AFTER_H["month" if codes & MONTH_CURES else "wait"]
        return max(fit, at) + timedelta(hours=max(after, rng.uniform(*wait)))
    return at + timedelta(hours=after)


def _finish(data: dict, R: _Runs, admitted, booked, raw, items, pilot_from, now: datetime) -> None:
    """data["runs"] and data["pilots"]: the admitted runs, their reservations, times and endings."""
    runs = data["runs"]
    keep = np.array([a is not None for a in admitted], bool)
    gpus, budget = np.array(R.gpus), np.array(R.budget, float)
    end = ending(R.drawn, budget, gpus)
    now_np = np.datetime64(now, "us")
    nat = np.datetime64("NaT", "us")
    at = np.array([a if a is not None else now for a in admitted], "datetime64[us]")
    res_from = np.array([b["reserved_from"] if b else now for b in booked], "datetime64[us]")
    res_until = np.array([b["reserved_until"] if b else now for b in booked], "datetime64[us]")
    hours = lambda h: (np.asarray(h, float) * 3.6e9).round().astype("int64") * _US   # noqa: E731
    never = runs["never"].to_numpy()
    started = at + hours(runs["late"].to_numpy())
    ended = np.where(never, res_until,
                     started + hours(end["actual"] / gpus + end["restarts"] * runs["restart_h"].to_numpy()))
    active = runs["open"].to_numpy() | (ended > now_np)
    # a run still going at now has started (a reservation unused so far is not yet "never used")
    started = np.where(active, np.where(at <= now_np, np.minimum(started, now_np), nat),
                       np.where(never, nat, started))
    ended = np.where(active, nat, ended)
    est = np.array([r if r is not None else 0.0 for r in raw])
    pilot = np.array(R.pilot, bool)
    itemised = {k: runs[k].to_numpy() * R.work for k in _EST_COLUMNS}
    for i, it in items.items():   # a pilot's estimate, itemised as a submit records it
        for k, name in zip(_EST_COLUMNS, ("est_compute_gpu_hours", "est_checkpoint_gpu_hours", "est_eval_gpu_hours",
                                          "est_data_loading_gpu_hours", "est_restart_gpu_hours")):
            itemised[k][i] = it[name] or 0.0
    out = pd.DataFrame({
        "i": runs["i"].to_numpy(), "team_i": runs["team_i"].to_numpy(), "kind_i": runs["kind_i"].to_numpy(),
        "cap_i": runs["cap_i"].to_numpy(), "gpus": gpus, "gpu_mem_gb": runs["gpu_mem_gb"].to_numpy(),
        "est": est, "src_i": np.where(pilot, SOURCES.index("pilot"), SOURCES.index("stated")),
        **itemised,
        "budget": budget, "max_rt": runs["max_rt"].to_numpy(),
        "reserved_from": res_from, "reserved_until": res_until,
        "reserved_gh": np.array([b["reserved_gpu_hours"] if b else 0.0 for b in booked]),
        "submitted_at": runs["submitted_at"].to_numpy(), "started_at": started, "ended_at": ended,
        **{k: np.where(active, np.nan, end[k]) for k in ("actual", "a_ckpt", "a_retry", "a_eval", "a_lost")},
        **{k: np.where(active, -1, end[k]) for k in ("stop_i", "interrupts", "restarts", "artifact_i", "reads")},
        "has_ckpt": end["has_ckpt"] & ~active, "ckpt_step": end["ckpt_step"],
        "full_eval": np.where(active, False, end["full_eval"]), "active": active,
        "allow": runs["allow"].to_numpy(), "ckpt_ok": runs["ckpt_ok"].to_numpy(),
        "skip_eval": runs["skip_eval"].to_numpy(), "exp_int": runs["exp_int"].to_numpy(), "snap": R.snap,
    })
    pilots = data["pilots"]
    measured = np.array([p if p is not None else now for p in pilot_from], "datetime64[us]")
    pilots = pilots.assign(measured_at=measured - hours(pilots["before_h"].to_numpy()))
    data["runs"] = out[keep].reset_index(drop=True)
    data["pilots"] = pilots[keep & pilot].drop(columns="before_h").reset_index(drop=True)
    data["active"] = int((active & keep).sum())
