"""Hostile values for gate requests, as raw JSON text (what a job's --comment, a c:request or a request
file may hold) and as Python values (what a parsed request may hold), and where to put them: any
field, a nested field, an unknown key. Each value is one the gate must judge (a reject naming the
field), never one that makes it fail. Hypothesis strategies, shared by the in-process, command-line
and gate-server tests."""
from __future__ import annotations

import json

from hypothesis import strategies as st

DEEP = 100_000
MEGABYTE = 1_000_000
PLACEHOLDER = "@@HOSTILE@@"

# a valid request of a team (its GPUs, runtime and capacity are the job's in the hook)
STATED = {"run_id": "hostile-ok", "kind": "exploratory", "gpu_mem_gb": 40, "budget_gpu_hours": 100,
          "estimated_gpu_hours": 1, "checkpoint_supported": True, "expected_interruptions": 0,
          "data_snapshot": "snap",
          "stop_policy": {"max_wall_clock_hours": 10, "early_stop": {"metric": "val_loss", "mode": "min"}}}
PILOT = {**{k: v for k, v in STATED.items() if k != "estimated_gpu_hours"},
         "pilot": {"steps_per_second": 3.0, "planned_steps": 1000, "peak_mem_gb": 30}}
JOB_FIELDS = ("team", "gpus", "max_runtime_hours", "capacity")  # a Slurm job sets these itself

# where a value goes: top-level fields, nested ones, and unknown keys
PATHS = ([(f,) for f in ("run_id", "team", "kind", "gpus", "gpu_mem_gb", "max_runtime_hours", "budget_gpu_hours",
                         "checkpoint_supported", "expected_interruptions", "capacity", "data_snapshot",
                         "estimated_gpu_hours", "pilot", "stop_policy", "skip_full_evaluation",
                         "holdout_allowance", "submitted_at", "note", "unknown_field")]
         + [("pilot", f) for f in ("steps_per_second", "worst_case_share", "planned_steps", "peak_mem_gb",
                                   "checkpoint_interval_steps", "restart_minutes", "unknown")]
         + [("stop_policy", f) for f in ("max_wall_clock_hours", "max_failed_steps", "early_stop", "unknown")]
         + [("stop_policy", "early_stop", f) for f in ("metric", "mode", "patience", "min_delta")])
HOSTILE_KEYS = ["x\udcff", "\ud800", "k" * MEGABYTE, "unknown"]


def deep_list(levels: int) -> list:
    """[[[...]]] `levels` deep, built without recursion."""
    root = node = []
    for _ in range(levels - 1):
        child: list = []
        node.append(child)
        node = child
    return root


def with_surrogate(pre: str, code: int, post: str) -> str:
    return pre + chr(code) + post


# ------------------------------------------------------------------------------------ Python values

_deep_lists = {n: deep_list(n) for n in (65, 1000, DEEP)}  # built once: nothing changes them

_junk = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=8).filter(lambda v: isinstance(v, (list, dict)) and len(v) > 0)
values = st.one_of(
    st.integers(310, 5000).map(lambda n: 10 ** n), st.integers(310, 5000).map(lambda n: -(10 ** n)),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    st.builds(with_surrogate, st.text(max_size=8), st.integers(0xD800, 0xDFFF), st.text(max_size=8)),
    st.sampled_from(["x" * MEGABYTE, "x\udcff" * (MEGABYTE // 2)]),
    st.sampled_from([65, 1000, DEEP]).map(_deep_lists.__getitem__),
    st.sampled_from([{"a\ud800": 10 ** 400}, [float("nan")], {"pilot": {"steps_per_second": 10 ** 5000}}]),
    _junk,
)
keys = st.one_of(st.sampled_from(HOSTILE_KEYS),
                 st.builds(with_surrogate, st.text(max_size=4), st.integers(0xD800, 0xDFFF), st.text(max_size=4)))


def placed(base: dict, path: tuple, value, key=None) -> dict:
    """A deep copy of `base` with `value` at `path` (its last step replaced by `key` when given: an
    unknown key holding the value)."""
    out = json.loads(json.dumps(base))
    node = out
    for step in path[:-1]:
        node = node[step] if isinstance(node.get(step), dict) else node.setdefault(step, {})
    node[key if key is not None else path[-1]] = value
    return out


def field_name(path: tuple, key=None) -> str:
    """The field a reject names for a value at `path` (lib.gate.request.field_label for a key)."""
    from lib.gate.request import field_label
    steps = list(path[:-1]) + [field_label(key if key is not None else path[-1])]
    return ".".join(steps)


def names_field(decision: dict, name: str) -> bool:
    """True when one of the decision's reasons names `name`, a field inside it or one holding it."""
    fields = [r.get("field") or "" for r in decision["reasons"]]
    return any(f == name or f.startswith(name + ".") or name.startswith(f + ".") for f in fields)


# ------------------------------------------------------------------------------------ raw JSON text

tokens = st.one_of(
    st.integers(310, 6000).map(lambda n: "9" * n), st.integers(310, 6000).map(lambda n: "-1" + "0" * n),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]),
    st.builds(with_surrogate, st.text(max_size=8), st.integers(0xD800, 0xDFFF), st.text(max_size=8)).map(json.dumps),
    st.sampled_from(['"' + "x" * MEGABYTE + '"', json.dumps("\udcff" * 1000)]),
    st.sampled_from([65, 1000, DEEP]).map(lambda n: "[" * n + "]" * n),
    st.sampled_from([65, DEEP]).map(lambda n: '{"a": ' * n + "1" + "}" * n),
    st.sampled_from(['{"x": [1, {"y": null}], "\\ud800": true}', '[NaN, -Infinity, ' + "9" * 400 + "]",
                     '{"' + "k" * 1000 + '": {"\\udfff": [[[]]]}}']),
    _junk.map(json.dumps),
)
key_tokens = st.sampled_from(['"x\\udcff"', '"\\ud800"', '"' + "k" * MEGABYTE + '"', '"unknown"'])


def placed_text(base: dict, path: tuple, token: str, key_token: str | None = None) -> str:
    """JSON text of `base` with the raw JSON `token` at `path` (under the raw JSON string `key_token`
    instead of the path's last step, when given)."""
    text = json.dumps(placed(base, path, PLACEHOLDER, key=PLACEHOLDER + "key" if key_token else None))
    if key_token:
        text = text.replace(json.dumps(PLACEHOLDER + "key"), key_token, 1)
    return text.replace(json.dumps(PLACEHOLDER), token, 1)
