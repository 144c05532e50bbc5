"""The what-if form's values -> a request (contract 'Request'), exactly as `python -m lib check` reads it.

Form widgets cannot be "absent", so optional numbers use 0 (and optional text an empty string) for
"not given"; those fields are left out of the request. Everything else is passed through unchanged,
so lib.gate.request validates it exactly as it would a JSON file. The fields, and which are numbers
(whole or not) and which true/false, are lib.gate.request's. The pilot's `gpus` is the form's
`pilot_gpus` (the request's own is `gpus`).
"""
from __future__ import annotations

import datetime as dt
import json
import math

from lib.dashboard.labels import estimate_item
from lib.gate.reasons import WARNING_NOTES, notes_of
from lib.gate.terms import minute_up, ordinal
from lib.gate.request import (BOOLEAN_FIELDS, EARLY_STOP_FIELDS, EARLY_STOP_MODES, NUMBER_FIELDS, PILOT_FIELDS,
                              REQUIRED_FIELDS, STOP_FIELDS, WHOLE_NUMBER_FIELDS)

_PILOT_OPTIONAL_ZERO = {"worst_case_steps_per_second", "checkpoint_interval_steps", "gpus"}
_PILOT_FORM_KEYS = {"gpus": "pilot_gpus"}   # pilot fields whose name the request uses too


def _num(key, v):
    if v is None:
        return None
    return int(v) if key in WHOLE_NUMBER_FIELDS else float(v)


def _typed(key, v):
    """A form value as the request field `key` holds it: a number, true/false, or as typed."""
    if key in NUMBER_FIELDS:
        return _num(key, v)
    return bool(v) if key in BOOLEAN_FIELDS else v


def start_time(day: dt.date | None, at: dt.time | None) -> dt.datetime | None:
    """The form's start (naive UTC): the day at the time of day (midnight when none); None without a
    day, meaning now."""
    return None if day is None else dt.datetime.combine(day, at or dt.time())


def request_from_form(v: dict) -> dict:
    """The request for form values `v` (keys as in the contract, plus 'estimate_from' = 'pilot' |
    'estimate' and the stop-rule keys flattened: max_wall_clock_hours, spend_limit_gpu_hours,
    max_failed_steps, early_stop_metric, early_stop_mode, early_stop_patience, early_stop_min_delta)."""
    r = {k: _typed(k, v.get(k)) for k in REQUIRED_FIELDS}
    r["run_id"] = str(v.get("run_id", "")).strip()
    snap = str(v.get("data_snapshot") or "").strip()
    if snap:
        r["data_snapshot"] = snap
    if v.get("estimate_from") == "pilot":
        pilot = {}
        for k in PILOT_FIELDS:
            x = v.get(_PILOT_FORM_KEYS.get(k, k))
            if x is None or (k in _PILOT_OPTIONAL_ZERO and not x):
                continue
            pilot[k] = _num(k, x)
        r["pilot"] = pilot
    else:
        r["estimated_gpu_hours"] = _num("estimated_gpu_hours", v.get("estimated_gpu_hours"))
    stop = {}
    for k in STOP_FIELDS:   # the limits; early_stop (not a number) below
        if k in NUMBER_FIELDS and v.get(k):
            stop[k] = _num(k, v[k])
    metric = str(v.get("early_stop_metric") or "").strip()
    if metric:
        es = {k: v.get(f"early_stop_{k}") for k in EARLY_STOP_FIELDS}   # metric, mode, patience, min_delta
        es.update({k: _num(k, x or 0) for k, x in es.items() if k in NUMBER_FIELDS},
                  metric=metric, mode=es["mode"] or EARLY_STOP_MODES[0])
        stop["early_stop"] = es
    if stop:
        r["stop_policy"] = stop
    if v.get("skip_full_evaluation"):
        r["skip_full_evaluation"] = True
    if v.get("holdout_allowance"):
        r["holdout_allowance"] = int(v["holdout_allowance"])
    note = str(v.get("note") or "").strip()
    if note:
        r["note"] = note
    return r


def request_json(request: dict) -> str:
    """The request as the JSON file `python -m lib submit` takes."""
    return json.dumps(request, indent=2, ensure_ascii=False)


def reasons_rows(decision: dict) -> list[dict]:
    """One row per reason of a decision, for a table (every reason with its fix)."""
    return [{"code": r.get("code"), "message": r.get("message"), "fix": r.get("fix"),
             "requested": r.get("requested"), "limit": r.get("limit"), "in_use": r.get("in_use"),
             "unit": r.get("unit"), "field": r.get("field")} for r in decision.get("reasons") or []]


def line_text(decision: dict) -> str | None:
    """Where a deferral that waits stands in the gate's line ("you would be 3rd in line for team vision,
    starting about ..."), from its `queue_place` and `planned_start` (lib.ledger.deciding.in_line);
    None for a decision that does not wait in it."""
    if decision.get("state") != "defer" or "planned_start" not in decision:
        return None
    place = decision.get("queue_place")
    where = f"{ordinal(place)} in line for team {decision.get('team')}" if place else "in the gate's line"
    start = decision["planned_start"]
    if start is None:
        return f"You would be {where}, with no planned start within the plan's horizon."
    when = minute_up(dt.datetime.fromisoformat(start))
    return (f"You would be {where}, starting about {when} UTC: the gate admits it by itself at its turn "
            "(no need to resubmit).")


def note_rows(decision: dict) -> list[dict]:
    """A decision's notes to show: {"warning": True for a note to act on before the run starts
    (lib.gate.reasons.WARNING_NOTES), "text": its message, "fix": its fix or None}. A note recorded
    before notes had codes (a plain string) is shown too."""
    return [{"warning": n.get("code") in WARNING_NOTES, "text": n["message"], "fix": n.get("fix")}
            for n in notes_of(decision)]


UPPER_UNKNOWN = ("unknown: too few past runs, or too many stopped at their budget, to bound the "
                 "estimate; a run whose budget is judged at the upper bound is judged at the median instead")
_BASIS = {"upper": "calibrated upper bound", "median": "calibrated median", "raw": "raw estimate"}


def shown_number(value):
    """A number as the What-if's tables show it: 1 decimal from 10 up, 2 below (GPU-hours, hours,
    interruptions alike); None or a non-number stays as it is."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return value
    return round(float(value), 1 if abs(value) >= 10 else 2)


def estimate_rows(decision: dict) -> list[dict]:
    """The itemised raw estimate and the raw / calibrated totals as (item, value, unit, note) rows,
    items named in words and values rounded (`shown_number`): GPU-hours except the wall clock (hours)
    and the interruptions. An unknown upper bound is said in words, never 'None'."""
    est = decision.get("estimate") or {}
    rows = [{"item": f"raw item: {estimate_item(k)}", "value": val, "unit": "GPU-h", "note": ""}
            for k, val in (est.get("items_gpu_hours") or {}).items()]
    expect = est.get("interruptions")
    if expect:   # preemptible: the stated number, the ledger's, and the larger that the items price
        rate = expect["rate"]
        rows += [{"item": "expected interruptions: stated", "value": expect["stated"], "unit": "interruptions",
                  "note": ""},
                 {"item": "expected interruptions: from the ledger", "value": expect["from_ledger"],
                  "unit": "interruptions",
                  "note": (f"{rate['per_gpu_hour']:.4g} per GPU-hour observed on preemptible capacity "
                           f"({'this team' if rate['scope'] == 'team' else 'all teams'}, {rate['runs']} runs)"
                           if rate else "no preemptible run in the ledger yet")},
                 {"item": "expected interruptions: used", "value": expect["used"], "unit": "interruptions",
                  "note": "the larger of the two" + (f" (priced in {estimate_item('restarts_and_lost_work')})"
                                                      if est.get("source") == "pilot" else
                                                      "; a stated estimate is taken whole")}]
    judged = _BASIS.get(est.get("judged_at"), est.get("judged_at"))
    for key, label, unit in (("raw_gpu_hours", "raw total", "GPU-h"),
                             ("median_gpu_hours", "calibrated median", "GPU-h"),
                             ("upper_gpu_hours", "calibrated upper bound", "GPU-h"),
                             ("judged_gpu_hours", f"judged against the budget ({judged})", "GPU-h"),
                             ("wall_hours", "wall clock", "h")):
        if key in est:
            value = est.get(key)
            note = UPPER_UNKNOWN if key == "upper_gpu_hours" and value is None else ""
            rows.append({"item": label, "value": value, "unit": unit, "note": note})
    return [{**r, "value": shown_number(r["value"])} for r in rows]


_METHODS = {"conformal": "split-conformal prediction", "tobit": "a Tobit fit (censored runs included)",
            "shifted": "the spread before the change, shifted to the runs since"}
_SCOPES = {"team×kind": "this team's runs of this kind", "team": "this team's runs of every kind",
           "all": "every team's runs"}


def calibration_caption(cal: dict) -> str:
    """One sentence on the calibration a decision used (lib.gate.calibration's result): what it rests
    on, its bound's method, and — only when they apply — a change it adapted to or why its upper
    bound is unknown. Each fact once (the calibration's own `note` repeats the counts)."""
    if not cal.get("scope"):
        return ("No comparable past runs to calibrate on: the raw estimate is used as the median, and the "
                f"upper bound is unknown until {cal.get('runs_needed')} runs have finished.")
    text = (f"Calibrated on {_SCOPES.get(cal['scope'], cal['scope'])}: {cal.get('n')} past runs, "
            f"{cal.get('n_censored')} of them censored")
    if cal.get("upper_factor") is None:
        text += (f"; upper bound unknown: it needs {cal.get('runs_needed')} runs with few enough of them "
                 "censored")
    else:
        text += f"; upper bound from {_METHODS.get(cal.get('method'), cal.get('method'))}"
    if cal.get("adapted_since"):
        text += (f", adapted to a change in the cost ratio since {str(cal['adapted_since'])[:16].replace('T', ' ')}"
                 f" UTC ({cal.get('runs_before_change')} earlier runs set aside)")
    return text + "."
