"""Hostile values in a request (integers beyond any float, lone surrogates, 100,000 levels of nesting,
NaN and ±Infinity, megabyte strings, unknown fields holding them, nested junk) are judged: an
invalid-request reject naming the field, never an exception. In-process (`check_request`, with
Hypothesis), through `submit_request` into the ledger, and through `python -m lib check|submit`."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lib.gate.terms import (JSONTooDeep, checked_number, finite_number, json_depth, json_text, loads_bounded,
                            number_problem, shown, utcnow)
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import LedgerFacts, check_request, decide_with, submit_request
from lib.ledger.recording import canonical_json
from tests.fixtures_hostile_requests import (DEEP, PATHS, PILOT, STATED, deep_list, field_name, keys, names_field,
                                             placed, placed_text, values)
from tests.fixtures_ledger import counts, run_cli
from tests.fixtures_slurm import make_slurm_ledger

VISION = {"team": "vision", "gpus": 2, "max_runtime_hours": 10, "capacity": "stable"}
NOW = utcnow()


def _strict_json(text: str):
    """Standard JSON only: NaN / Infinity refused, and the text must be valid UTF-8."""
    text.encode("utf-8")

    def refuse(name):
        raise AssertionError(f"{name} in recorded JSON")
    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------ the helpers underneath

def test_integers_beyond_any_float_are_too_large_never_an_overflow():
    for value in (10 ** 400, -(10 ** 400), 10 ** 5000):
        assert "too large" in number_problem(value)
        assert "too large" in number_problem(value, 1, integral=True, maximum=2 ** 31 - 1)
        assert finite_number(value) is None
        with pytest.raises(ValueError, match="too large"):
            checked_number("x", value)
    assert number_problem(10 ** 300) is None  # a float can hold it: a number, judged by its range


def test_a_value_is_shown_short_whatever_it_is():
    for value in (10 ** 5000, deep_list(DEEP), "x" * 1_000_000, {"a\ud800": [float("nan")] * 1000}):
        text = shown(value)
        assert len(text) <= 200
        text.encode("utf-8")  # a lone surrogate comes out escaped


def test_json_nested_too_deeply_is_refused_before_parsing():
    started = time.perf_counter()
    for text in ("[" * DEEP + "]" * DEEP, "[" * DEEP, '{"a": ' * DEEP + "1" + "}" * DEEP):
        with pytest.raises(JSONTooDeep, match="deeper than 64 levels"):
            loads_bounded(text)
    assert time.perf_counter() - started < 5
    assert loads_bounded("[" * 64 + "]" * 64) is not None
    assert json_depth('{"note": "[[[[[[[[ {{{{ \\" [[["}') == 1  # brackets in strings do not count
    parsed = loads_bounded('{"a": NaN, "b": -Infinity, "c": ' + "9" * 5000 + ', "d": "\\udcff"}')
    assert parsed["a"] != parsed["a"] and parsed["b"] == float("-inf")
    assert parsed["c"] > 10 ** 400 and parsed["d"] == "\udcff"


def test_json_out_is_standard_utf8_for_any_value_and_exact_for_plain_ones():
    plain = {"run_id": "r-ü-日本", "n": [1, 2.5, None, True]}
    assert json_text(plain) == json.dumps(plain, ensure_ascii=False)
    odd = {"s": "a\udcffb\ud800", "k\udfff": 1, "nan": float("nan"), "big": 10 ** 5000, "deep": deep_list(DEEP)}
    back = _strict_json(json_text(odd))
    assert back["s"] == "a\udcffb\ud800" and back["k\udfff"] == 1  # surrogates read back as they were
    assert back["nan"] == "NaN" and "300 digits" in back["big"]


# ------------------------------------------------------------------------------ in-process decisions

class _RememberedState(LedgerFacts):
    """The ledger's facts, each team's state read once: it does not depend on the hostile value, and
    reading it (~0.1 s) is what would make hundreds of examples slow."""

    def __init__(self, con):
        super().__init__(con)
        self._states = {}

    def state(self, team, now, kind, capacity=None):
        key = (team, kind, capacity in (None, "preemptible"))   # a hostile capacity may be unhashable
        if key not in self._states:
            self._states[key] = super().state(team, now, kind, capacity)
        return self._states[key]


@pytest.fixture(scope="module")
def facts(slurm_template):
    with open_ledger(slurm_template, read_only=True) as con:
        yield _RememberedState(con)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from([STATED, PILOT]), path=st.sampled_from(PATHS), value=values,
       key=st.one_of(st.none(), keys))
def test_any_hostile_value_anywhere_is_a_reject_naming_its_field(facts, base, path, value, key):
    """What check_request decides once it has opened the ledger (decide_with over the ledger's facts)."""
    request = placed({**base, **VISION}, path, value, key=key)
    decision, _ = decide_with(request, NOW, facts)
    assert decision["state"] == "reject", decision["reasons"]
    name = field_name(path, key)
    assert names_field(decision, name), (name, [r.get("field") for r in decision["reasons"]])
    assert all(len(r["message"]) < 2000 for r in decision["reasons"])
    _strict_json(canonical_json(decision))  # what the journal and the ledger would record
    _strict_json(canonical_json(request))


@pytest.mark.parametrize("path, value", [(("run_id",), "\ud800"), (("team",), "t\udfff"), (("gpus",), 10 ** 400),
                                         (("note",), deep_list(DEEP)), (("kind",), "k" * 1_000_000)],
                         ids=["surrogate-run-id", "surrogate-team", "huge-gpus", "deep-note", "megabyte-kind"])
def test_check_request_rejects_hostile_values_by_field(slurm_template, path, value):
    decision = check_request(placed({**PILOT, **VISION}, path, value), db=slurm_template)
    assert decision["state"] == "reject" and names_field(decision, field_name(path))


def test_the_unchanged_requests_are_judged_not_rejected(slurm_template):
    for base in (STATED, PILOT):
        assert check_request({**base, **VISION}, db=slurm_template)["state"] in ("admit", "defer")


@pytest.mark.parametrize("path, value", [
    (("budget_gpu_hours",), 10 ** 400), (("run_id",), "run-\ud800"), (("team",), "\udcff"),
    (("note",), float("nan")), (("pilot", "planned_steps"), 10 ** 5000), (("unknown",), deep_list(DEEP)),
], ids=["huge-budget", "surrogate-run-id", "surrogate-team", "nan-note", "5000-digit-steps", "deep-unknown"])
def test_a_hostile_submit_records_a_reject_in_standard_json_and_books_nothing(tmp_path, path, value):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    before = counts(db)
    decision = submit_request(placed({**PILOT, **VISION}, path, value), db=db)
    assert decision["state"] == "reject" and names_field(decision, field_name(path))
    after = counts(db)
    assert after == {**before, "decisions": before["decisions"] + 1}
    with open_ledger(db, read_only=True) as con:
        state, request_json, decision_json = con.execute(
            "SELECT state, request_json, decision_json FROM decisions").fetchone()
    assert state == "reject"
    _strict_json(request_json)
    _strict_json(decision_json)


# ------------------------------------------------------------------------------ the command line

BASE_CLI = {**STATED, **VISION}
CLI_CASES = {
    "huge integer": (placed_text(BASE_CLI, ("budget_gpu_hours",), "1" + "0" * 400), "too large"),
    "lone surrogate in run_id": (placed_text(BASE_CLI, ("run_id",), '"r-\\ud800"'), "valid Unicode"),
    "lone surrogate in team": (placed_text(BASE_CLI, ("team",), '"\\udcff"'), "team must be a team name"),
    "lone surrogate in a key": (placed_text(BASE_CLI, ("x",), "1", key_token='"k\\udfff"'), "not valid Unicode"),
    "megabyte note": (placed_text(BASE_CLI, ("note",), '"' + "x" * 900_000 + '"'), "at most 2000 characters"),
    "NaN": (placed_text(BASE_CLI, ("gpu_mem_gb",), "NaN"), "NaN"),
    "deep nesting": (placed_text(BASE_CLI, ("note",), "[" * DEEP + "]" * DEEP), "nested deeper than 64 levels"),
    "5000 digits": (placed_text(BASE_CLI, ("gpus",), "9" * 5000), "not valid JSON"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_the_command_line_exits_2_for_hostile_values_and_submit_books_nothing(tmp_path, case):
    text, words = CLI_CASES[case]
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    before = counts(db)
    for command in ("check", "submit"):
        p = run_cli(command, "-", db=db, stdin=text, env={"TG_GATE_SOCKET": ""})
        assert p.returncode == 2, (command, p.returncode, p.stderr[-500:])
        assert words in p.stdout + p.stderr, (command, p.stdout[-500:], p.stderr[-500:])
        assert "gate failure" not in p.stderr
        if p.stdout.strip():
            assert json.loads(p.stdout)["state"] == "reject"
    after = counts(db)
    assert {k: after[k] for k in ("runs", "pilots", "teams")} == {k: before[k] for k in ("runs", "pilots", "teams")}
    assert after["decisions"] - before["decisions"] <= 1  # at most the reject submit recorded


# ------------------------------------------------------------------------------ the hook deciding in-process

@pytest.mark.parametrize("changes", [
    {"team": "\udcff"}, {"team": 10 ** 400}, {"run_id": "\ud800"}, {"budget_gpu_hours": 10 ** 5000},
    {"note": deep_list(1000)}, {"k\udfff": float("nan")}, {"max_runtime_hours": 1.7e308},
], ids=["surrogate-team", "huge-team", "surrogate-run-id", "5000-digit-budget", "deep-note", "surrogate-key",
        "runtime-beyond-slurm"])
def test_the_hook_deciding_in_process_rejects_hostile_values_under_accept_and_flag(tmp_path, changes):
    """No gate server: lib.slurm.in_process.judge_in_process opens the ledger itself (the cold path). No --account and no
    --time, so the comment's team and runtime are the ones judged."""
    from lib.slurm import hook
    from lib.slurm.in_process import judge_in_process
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    comment = json_text({**STATED, "team": "vision", "max_runtime_hours": 10, **changes})
    job = {"account": None, "time_limit": None, "name": "cold", "comment": comment, "uid": "0",
           "tres_per_node": "gres:gpu:2"}
    config = {**hook.config_from_env({}), "db": str(db), "on_failure": "accept-and-flag",
              "flag_log": str(tmp_path / "flags.jsonl")}
    out = judge_in_process(job, config)
    assert out.code == 1, out.lines()
    assert out.msg.startswith(("training-gate: rejected", "training-gate: deferred")), out.msg  # 1.7e308 h: a runtime cap
    assert not (tmp_path / "flags.jsonl").exists()  # judged: no gate failure to flag
    "\n".join(out.lines()).encode("utf-8")
