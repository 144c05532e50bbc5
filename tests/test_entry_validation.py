"""Where data enters the gate: team names (CSV, sacct, teams file, requests), the complete upload
error list, and the shipped template against the shipped policy."""
from __future__ import annotations


import pytest

from lib.gate.admission import decide
from lib.gate.request import validate
from lib.gate.terms import TEAM_NAME, team_name_problem
from lib.ledger.connection import open_ledger
from lib.ledger.imports import import_runs
from lib.ledger.teams_file import TeamsFileError, parse_teams, sync_teams
from tests.fixtures_gate import policy, request, state
from tests.fixtures_imports import HEADER, dump
from tests.fixtures_ledger import REPO, run_cli
from tests.test_import_sacct import line, sacct

EVIL = '<a href="https://example.invalid/x">t</a>'


# ------------------------------------------------------------------------------ the one pattern

@pytest.mark.parametrize("name", ["vision", "nlp-research", "Team_2.b", "a", "x" * 64])
def test_team_name_pattern_accepts(name):
    assert TEAM_NAME.fullmatch(name) and team_name_problem(name) is None


@pytest.mark.parametrize("name", [EVIL, "", "x" * 65, "-leading-dash", ".hidden", "has space",
                                  "a\n", "tab\t", "émoji", "a/b", "a'b", None, 5])
def test_team_name_pattern_refuses(name):
    assert team_name_problem(name)


# ------------------------------------------------------------------------------ CSV import

def test_csv_import_of_a_bad_team_name_exits_2_and_leaves_the_ledger_unchanged(import_ledger, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("run_id,team,kind,gpus\n"
                 "ok-1,vision,exploratory,1\n"
                 f'bad-1,"{EVIL.replace(chr(34), chr(34) * 2)}",exploratory,1\n', encoding="utf-8")
    before_bytes = import_ledger.read_bytes()
    before = dump(import_ledger)
    p = run_cli("import", f, "--create-teams", db=import_ledger)
    assert p.returncode == 2, p.stderr
    assert "line 3, column team" in p.stderr and EVIL in p.stderr and "not a valid team name" in p.stderr
    assert dump(import_ledger) == before
    assert import_ledger.read_bytes() == before_bytes


def test_csv_bad_team_names_one_error_per_row(import_ledger):
    data = (HEADER + "\n"
            + "".join(f"r{i},{team},exploratory,1,,,,,\n" for i, team in
                      enumerate(["vision", "-x", "vision", "a b", "-x"], start=1)))
    r = import_runs(data.encode(), db=import_ledger, create_teams=True)
    bad = [(e["line"], e["column"], e["value"]) for e in r.errors if "team name" in e["message"]]
    assert bad == [(3, "team", "-x"), (5, "team", "a b"), (6, "team", "-x")]
    assert not r.written and r.teams_created == []


# ------------------------------------------------------------------------------ sacct import

def test_sacct_account_that_is_not_a_team_name_is_refused(import_ledger):
    before = dump(import_ledger)
    r = import_runs(sacct(line(jobid="100"), line(jobid="101", account="ev<il>")), fmt="sacct",
                    db=import_ledger, create_teams=True)
    assert [(e["line"], e["column"], e["value"]) for e in r.errors] == [(3, "account", "ev<il>")]
    assert "team name" in r.errors[0]["message"] and not r.written
    assert dump(import_ledger) == before


# ------------------------------------------------------------------------------ teams file

def _teams_text_with(name: str) -> str:
    text = (REPO / "data" / "teams.toml").read_text(encoding="utf-8")
    return text.replace("[teams.safety]", f"[teams.{name}]\nbogus_key = 1\n\n[teams.safety]", 1)


def test_teams_file_with_a_bad_team_name_lists_every_problem():
    with pytest.raises(TeamsFileError) as exc:
        parse_teams(_teams_text_with(f"'{EVIL}'"))
    problems = exc.value.problems
    assert any(EVIL in p and "not valid" in p for p in problems)
    assert any("bogus_key" in p for p in problems)   # the table's own problems are listed too


def test_teams_command_exits_2_on_a_bad_team_name(tmp_path):
    f = tmp_path / "teams.toml"
    f.write_text(_teams_text_with(f"'{EVIL}'"), encoding="utf-8")
    db = tmp_path / "ledger.duckdb"
    p = run_cli("teams", "--file", f, db=db)
    assert p.returncode == 2, p.stderr
    assert EVIL in p.stderr and "bogus_key" in p.stderr


def test_shipped_teams_file_is_valid(tmp_path):
    with open_ledger(tmp_path / "l.duckdb") as con:
        counts = sync_teams(con)
    assert counts["teams_inserted"] == 8


# ------------------------------------------------------------------------------ requests

def test_request_with_a_bad_team_name_is_an_invalid_request_naming_the_field():
    _, problems = validate(request(team=EVIL))
    assert [p["field"] for p in problems] == ["team"]
    decision = decide(request(team=EVIL), policy(), state())
    assert decision["state"] == "reject"
    assert [(r["code"], r.get("field")) for r in decision["reasons"]] == [("invalid-request", "team")]


def test_check_command_rejects_a_bad_team_name(tmp_path):
    import json
    f = tmp_path / "req.json"
    f.write_text(json.dumps(request(team=EVIL)))
    p = run_cli("check", f, db=tmp_path / "l.duckdb")
    assert p.returncode == 2, p.stderr
    assert '"field": "team"' in p.stdout and "invalid-request" in p.stdout


# ------------------------------------------------------------------------------ the complete list

def test_a_bad_number_does_not_hide_the_rows_other_problems(import_ledger):
    data = ("run_id,team,kind,capacity,gpus,started_at,ended_at,actual_gpu_hours,stop_reason\n"
            "r1,visoin,exploratry,stabel,2,2024-05-01T10:00:00Z,2024-05-01T09:00:00Z,abc,finished\n")
    r = import_runs(data.encode(), db=import_ledger)
    got = sorted((e["line"], e["column"], e["value"]) for e in r.errors)
    assert len(r.errors) == 6, r.errors
    assert got == sorted([(2, "team", "visoin"), (2, "kind", "exploratry"), (2, "capacity", "stabel"),
                          (2, "ended_at", "2024-05-01 09:00:00"), (2, "actual_gpu_hours", "abc"),
                          (2, "stop_reason", "finished")])
    assert "not a number" in next(e for e in r.errors if e["column"] == "actual_gpu_hours")["message"]


def test_a_missing_required_column_does_not_hide_row_problems(import_ledger):
    data = "run_id,team,gpus\nr1,vision,two\nr2,vision,3\n"
    before = dump(import_ledger)
    for dry_run in (False, True):
        r = import_runs(data.encode(), db=import_ledger, dry_run=dry_run)
        got = [(e["line"], e["column"], e["value"]) for e in r.errors]
        assert got == [(1, "kind", None), (2, "gpus", "two")], r.errors
        assert not r.written
    assert dump(import_ledger) == before


def test_a_missing_required_column_alone_is_still_refused(import_ledger):
    r = import_runs(b"run_id,team,gpus\nr1,vision,2\n", db=import_ledger)
    assert [(e["line"], e["column"]) for e in r.errors] == [(1, "kind")] and not r.written


def test_numbers_with_spaces_and_exponents_still_import(import_ledger):
    data = "run_id,team,kind,gpus,actual_gpu_hours\nr1,vision,exploratory, 2 ,1e1\n"
    r = import_runs(data.encode(), db=import_ledger)
    assert r.errors == [] and r.inserted == 1


# ------------------------------------------------------------------------------ the template

def test_template_imports_into_a_ledger_of_the_shipped_teams_without_creating_teams(tmp_path):
    db = tmp_path / "ledger.duckdb"
    with open_ledger(db) as con:
        sync_teams(con)
    r = import_runs(REPO / "data" / "runs_template.csv", db=db)
    assert r.errors == [] and r.inserted == 3 and r.teams_created == []


def test_template_teams_are_in_the_shipped_teams_file():
    import csv
    teams, _ = parse_teams((REPO / "data" / "teams.toml").read_text(encoding="utf-8"))
    with open(REPO / "data" / "runs_template.csv", newline="", encoding="utf-8") as f:
        used = {row["team"] for row in csv.DictReader(f)}
    assert used <= {t["team"] for t in teams}


# ------------------------------------------------------------------------------ the no-pilot reason

def test_no_pilot_reason_names_the_stated_estimate_and_the_compared_calibrated_bound():
    req = request(estimated_gpu_hours=900.0, budget_gpu_hours=5000.0, gpus=64, max_runtime_hours=72.0)
    req.pop("pilot", None)
    pol = policy(pilot_required_above_gpu_hours=1000.0, budget_basis_exploratory="upper",
                 max_gpus_per_job=64, reserved_gpus=64, monthly_budget_gpu_hours=1e6)
    cal = {"scope": "team", "method": "conformal", "n": 20, "n_censored": 0, "level": 0.9,
           "factor": 1.2, "upper_factor": 1.7363, "runs_needed": 9, "note": ""}
    decision = decide(req, pol, state(calibration=cal))
    no_pilot = next(r for r in decision["reasons"] if r["code"] == "no-pilot")
    assert "stated estimate 900.0 GPU-h" in no_pilot["message"]
    assert "calibrated upper bound 1562.7 GPU-h" in no_pilot["message"]
    assert "pilot_required_above_gpu_hours 1000" in no_pilot["message"]
    assert no_pilot["requested"] == 1562.67 and no_pilot["limit"] == 1000.0


def test_unknown_team_reject_names_team_once_for_a_bad_name():
    from lib.gate.admission import unknown_team
    decision = unknown_team(request(team=EVIL), known_teams=["vision"])
    assert decision["state"] == "reject"
    assert [(r["code"], r.get("field")) for r in decision["reasons"]] == [("invalid-request", "team")]
    assert "team name" in decision["reasons"][0]["message"]


def test_slurm_hook_account_that_is_not_a_team_name_is_an_invalid_request(tmp_path):
    from lib.slurm import hook as h
    from lib.slurm.in_process import judge_in_process
    from lib.slurm.wire import EXIT_ACCEPTED
    from tests.fixtures_slurm import decisions, job, make_slurm_ledger
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    config = {**h.config_from_env({}), "db": str(db), "flag_log": str(tmp_path / "flags.jsonl")}
    out = judge_in_process(job(account="ev<il>"), config)
    assert out.code != EXIT_ACCEPTED
    (d,) = decisions(db)
    assert d["state"] == "reject" and d["reason_codes"] == ["invalid-request"]
    assert "team name" in out.msg
