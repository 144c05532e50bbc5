"""Arguments at the edges of the command line: a time off the calendar the gate keeps, a forecast
horizon of a million weeks, a teams file with numbers no ledger column holds, a FIFO or a directory
where a file is due. Each is bad input: exit 2, one line on stderr saying what and where, no
traceback, at once — never a hang, never exit 1 (which a submit hook reads as "defer") or 3."""
from __future__ import annotations

import os
import time

import pytest

from lib.cli.args import TIME_RANGE
from lib.planning.forecast.demand import MAX_WEEKS
from tests.fixtures_ledger import TINY_TEAMS, counts, query, run_cli, tiny_request, write_json

FAST_S = 20   # a real process on a shared machine: well under the 24 s a million weeks took


def assert_bad_input(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "proposed.toml"
    path.write_text(TINY_TEAMS, encoding="utf-8")
    return path


@pytest.mark.parametrize("args, needles", [
    (["replay", "--to", "9999-12-31"], ["argument --to", "'9999-12-31'", TIME_RANGE]),
    (["replay", "--from", "0001-01-01"], ["argument --from", "'0001-01-01'", TIME_RANGE]),
    (["replay", "--from", "1999-12-31T23:59:59"], ["argument --from", "1999-12-31T23:59:59"]),
    (["replay", "--to", "0001-01-01T00:00:00+01:00"], ["argument --to", "0001-01-01T00:00:00+01:00"]),
    (["forecast", "--as-of", "0001-01-01"], ["argument --as-of", "'0001-01-01'", TIME_RANGE]),
    (["forecast", "--as-of", "9999-12-31T23:59:59"], ["argument --as-of", "9999-12-31T23:59:59"]),
    (["forecast", "--as-of", "2099-12-31T23:00:00-05:00"], ["argument --as-of", "2099-12-31T23:00:00-05:00"]),
    (["forecast", "--weeks", "1000000"], ["argument --weeks", f"at most {MAX_WEEKS} weeks", "'1000000'"]),
    (["forecast", "--weeks", str(MAX_WEEKS + 1)], ["argument --weeks", f"'{MAX_WEEKS + 1}'"]),
    (["finish", "tiny-001", "--actual-gpu-hours", "1", "--stop-reason", "completed", "--ended-at", "0001-01-01"],
     ["argument --ended-at", "'0001-01-01'"]),
    (["check", "REQUEST", "--now", "9999-12-31T23:59:59-01:00"], ["argument --now", "9999-12-31T23:59:59-01:00"]),
])
def test_a_time_off_the_gates_calendar_or_a_horizon_too_far_is_a_usage_error(tiny_ledger, policy, tmp_path,
                                                                             args, needles):
    if args[0] == "replay":
        args = [*args, "--policy", policy]
    args = [str(write_json(tmp_path / "r.json", tiny_request(1))) if a == "REQUEST" else a for a in args]
    before = counts(tiny_ledger)
    t0 = time.monotonic()
    p = run_cli(*args, db=tiny_ledger, timeout=FAST_S)
    assert time.monotonic() - t0 < FAST_S
    assert_bad_input(p, *needles)
    assert counts(tiny_ledger) == before


def test_the_calendars_last_day_and_the_farthest_horizon_are_still_taken(tiny_ledger, policy):
    p = run_cli("replay", "--policy", policy, "--from", "2099-12-01", "--to", "2099-12-31", db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert '"to": "2100-01-01T00:00:00"' in p.stdout      # through the end of the last day
    p = run_cli("forecast", "--weeks", str(MAX_WEEKS), "--as-of", "2000-01-01", db=tiny_ledger)
    assert p.returncode == 0, p.stderr


def test_the_forecast_function_refuses_a_horizon_past_the_maximum(tiny_ledger):
    from lib.gate.terms import InputError
    from lib.ledger.forecast import forecast
    with pytest.raises(InputError, match=f"from 1 to {MAX_WEEKS}, got 1000000"):
        forecast(tiny_ledger, weeks=1_000_000)


BIG = 10**30


@pytest.mark.parametrize("line, key, shown", [
    (f"reserved_gpus = {BIG}", "[teams.tiny] reserved_gpus", "100000000000... (31 digits)"),
    ("reserved_gpus = 2147483648", "[teams.tiny] reserved_gpus", "2147483648"),
    ("max_gpus_per_job = 1e30", "[teams.tiny] max_gpus_per_job", "1e+30"),
    ("retraining_reserved_gpus = -99999999999", "[teams.tiny] retraining_reserved_gpus", "-99999999999"),
    (f"monthly_budget_gpu_hours = {10**400}", "[teams.tiny] monthly_budget_gpu_hours", "(401 digits)"),
    (f"max_runtime_hours = {-10**400}", "[teams.tiny] max_runtime_hours", "-10000000000... (401 digits)"),
])
def test_a_teams_number_too_large_for_the_ledger_names_the_key_and_the_value(tmp_path, line, key, shown):
    key_name = line.split(" =")[0]
    text = "\n".join(ln for ln in TINY_TEAMS.splitlines() if not ln.startswith(key_name + " "))
    path = tmp_path / "teams.toml"
    path.write_text(text.replace("[teams.tiny]\n", f"[teams.tiny]\n{line}\n"), encoding="utf-8")
    db = tmp_path / "g.duckdb"
    p = run_cli("teams", "--file", path, db=db)
    assert_bad_input(p, str(path), key, shown)
    assert query(db, "SELECT count(*) FROM teams") == [(0,)]


def test_a_price_or_an_integer_past_pythons_digits_is_a_teams_file_error(tmp_path):
    db = tmp_path / "g.duckdb"
    path = tmp_path / "teams.toml"
    path.write_text(TINY_TEAMS + f'\n[prices]\ncurrency = "USD"\nstable = {10**400}\n', encoding="utf-8")
    assert_bad_input(run_cli("teams", "--file", path, db=db), "[prices] stable", "(401 digits)")
    path.write_text(TINY_TEAMS.replace("reserved_gpus = 8", "reserved_gpus = 1" + "0" * 5000), encoding="utf-8")
    assert_bad_input(run_cli("teams", "--file", path, db=db), "not valid TOML", "5001 digits")
    path.write_text(TINY_TEAMS.replace('team = "tiny"', 'team = "tiny"\ncreated_at = 0001-01-01T00:00:00+01:00'),
                    encoding="utf-8")
    assert_bad_input(run_cli("teams", "--file", path, db=db), "created_at", "0001")


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("args, needle", [
    (["teams", "--file", "FIFO"], "is a FIFO (named pipe), not a regular file"),
    (["replay", "--policy", "FIFO"], "is a FIFO (named pipe), not a regular file"),
    (["demo", "--teams-file", "FIFO"], "is a FIFO (named pipe), not a regular file"),
    (["import", "FIFO"], "is a FIFO (named pipe), not a regular file"),
    (["import", "FIFO", "--dry-run"], "is a FIFO (named pipe), not a regular file"),
    (["check", "FIFO"], "cannot read request"),
    (["submit", "FIFO"], "cannot read request"),
    (["replay", "--policy", "DIR"], "is a directory, not a regular file"),
    (["teams", "--file", "DIR"], "is a directory, not a regular file"),
    (["import", "DIR"], "is a directory, not a regular file"),
])
def test_a_fifo_or_a_directory_given_as_a_file_is_refused_without_waiting(tiny_ledger, fifo, tmp_path, args, needle):
    args = [str(fifo) if a == "FIFO" else str(tmp_path) if a == "DIR" else a for a in args]
    before = counts(tiny_ledger)
    p = run_cli(*args, db=tiny_ledger, timeout=FAST_S)   # a read of the FIFO would block: the timeout fails it
    assert_bad_input(p, needle, args[-1] if args[-1] != "--dry-run" else args[-2])
    assert counts(tiny_ledger) == before


def test_stdin_stays_a_request_source(tiny_ledger):
    import json
    p = run_cli("check", "-", db=tiny_ledger, stdin=json.dumps(tiny_request(1)))
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("nested", ["[ " * 2000 + "1" + " ]" * 2000, "{a = " * 2000 + "1" + "}" * 2000])
def test_a_teams_file_nested_thousands_deep_is_bad_input_not_a_gate_failure(tmp_path, nested):
    db = tmp_path / "g.duckdb"
    path = tmp_path / "teams.toml"
    path.write_text(TINY_TEAMS + f"\n[alerts]\nx = {nested}\n", encoding="utf-8")
    assert_bad_input(run_cli("teams", "--file", path, db=db), str(path), "not valid TOML", "nested too deeply")
    assert query(db, "SELECT count(*) FROM teams") == [(0,)]
