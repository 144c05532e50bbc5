"""`python -m lib`: real processes, JSON on stdout, messages on stderr, documented exit codes."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import timedelta

import duckdb
import pytest

from lib.ledger.deciding import submit_request
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import REPO, counts, demo_request, query, run_cli, tiny_request, write_json

AT = ["--now", NOW.isoformat()]   # what-ifs (check) at the suite's clock; a submit is dated by the real one


def test_check_prints_the_decision_and_writes_nothing(demo_ledger, tmp_path):
    before = counts(demo_ledger)
    p = run_cli("check", write_json(tmp_path / "r.json", demo_request()), *AT, db=demo_ledger)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["state"] == "admit" and d["run_id"] == "vision-test-0001"
    assert p.stdout == json.dumps(d, sort_keys=True, indent=2, ensure_ascii=False) + "\n"  # stable
    assert "nothing written" in p.stderr
    assert counts(demo_ledger) == before


def test_submit_from_stdin_records_and_says_so(demo_ledger):
    p = run_cli("submit", "-", db=demo_ledger, stdin=json.dumps(demo_request()))
    assert p.returncode == 0, p.stderr
    assert "reservation" in p.stderr
    assert query(demo_ledger, "SELECT state FROM decisions WHERE origin = 'cli'") == [("admit",)]
    assert query(demo_ledger, "SELECT count(*) FROM runs WHERE run_id = 'vision-test-0001'") == [(1,)]


def test_defer_exits_1_with_the_reasons_on_stderr(demo_ledger, tmp_path):
    p = run_cli("submit", write_json(tmp_path / "r.json", demo_request(budget_gpu_hours=1)), db=demo_ledger)
    assert p.returncode == 1
    assert json.loads(p.stdout)["reasons"][0]["code"] == "budget"
    assert "[budget]" in p.stderr


@pytest.mark.parametrize("body, needle", [
    ("", "empty"),
    ("{bad json", "not valid JSON"),
    ('{"x": NaN}', "not valid JSON"),
    ("[1, 2]", None),
])
def test_bad_request_input_exits_2(demo_ledger, body, needle):
    before = counts(demo_ledger)
    p = run_cli("check", "-", db=demo_ledger, stdin=body)
    assert p.returncode == 2
    if needle:
        assert needle in p.stderr
    else:
        assert json.loads(p.stdout)["state"] == "reject"
    assert counts(demo_ledger) == before


def test_invalid_and_unknown_team_requests_are_rejected_with_exit_2(demo_ledger, tmp_path):
    p = run_cli("submit", write_json(tmp_path / "r.json", demo_request(team="marketing", gpus="two")),
                db=demo_ledger)
    assert p.returncode == 2
    fields = [r.get("field") for r in json.loads(p.stdout)["reasons"]]
    assert "gpus" in fields
    p = run_cli("submit", write_json(tmp_path / "r.json", demo_request(team="marketing")), db=demo_ledger)
    assert p.returncode == 2
    assert json.loads(p.stdout)["reasons"][0]["field"] == "team"
    assert query(demo_ledger, "SELECT count(*) FROM decisions WHERE origin = 'cli'") == [(2,)]


def test_a_submit_whose_answer_was_lost_is_retried_safely(demo_ledger, tmp_path):
    path = write_json(tmp_path / "r.json", demo_request())
    env = {**os.environ, "GATE_DB": str(demo_ledger)}
    lost = subprocess.Popen([sys.executable, "-m", "lib", "submit", str(path)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lost.stdout.close()  # the caller goes away before the answer: it never learns the decision
    err = lost.stderr.read()
    assert lost.wait(timeout=60) != 0, err
    [(state, recorded)] = query(demo_ledger, "SELECT state, decision_json FROM decisions WHERE origin = 'cli'")
    assert state == "admit"
    before = counts(demo_ledger)

    retry = write_json(tmp_path / "retry.json", dict(reversed(list(demo_request().items()))))
    p = run_cli("submit", retry, db=demo_ledger)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert (d["state"], d["replayed"], d["decided_at"]) == ("admit", True, json.loads(recorded)["decided_at"])
    assert "nothing new written" in p.stderr
    p = run_cli("check", retry, db=demo_ledger)
    assert p.returncode == 0 and json.loads(p.stdout) == d
    assert counts(demo_ledger) == before

    p = run_cli("submit", write_json(tmp_path / "other.json", demo_request(gpus=4)), db=demo_ledger)
    assert p.returncode == 2 and json.loads(p.stdout)["reasons"][0]["field"] == "run_id"


def test_missing_request_file_exits_2(demo_ledger, tmp_path):
    p = run_cli("check", tmp_path / "nope.json", db=demo_ledger)
    assert p.returncode == 2 and "cannot read" in p.stderr


def test_finish_records_actuals_and_refuses_unknown_runs(tiny_ledger, tmp_path):
    assert run_cli("submit", write_json(tmp_path / "r.json", tiny_request(1)),
                   db=tiny_ledger).returncode == 0
    p = run_cli("finish", "tiny-001", "--actual-gpu-hours", "7.5", "--stop-reason", "wall-clock",
                "--last-valid-checkpoint", "ckpt/step-400", "--ended-at", (NOW + timedelta(hours=3)).isoformat(),
                "--interruptions", "1", "--no-full-evaluation", db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert "updated run tiny-001" in p.stderr
    assert query(tiny_ledger, "SELECT actual_gpu_hours, stop_reason, artifact_status, last_valid_checkpoint, "
                              "full_evaluation FROM runs") == [(7.5, "wall-clock", "incomplete",
                                                                "ckpt/step-400", False)]
    p = run_cli("finish", "nope", "--actual-gpu-hours", "1", "--stop-reason", "completed", db=tiny_ledger)
    assert p.returncode == 2 and "not in the ledger" in p.stderr
    p = run_cli("finish", "tiny-001", "--actual-gpu-hours", "-1", "--stop-reason", "completed",
                db=tiny_ledger)
    assert p.returncode == 2
    p = run_cli("finish", "tiny-001", "--actual-gpu-hours", "1", "--stop-reason", "exploded",
                db=tiny_ledger)
    assert p.returncode == 2


def test_export_csv_neutralises_formula_cells(tiny_ledger, tmp_path):
    for i, note in enumerate(["=HYPERLINK(\"http://x\")", "+1+1", "-2", "@SUM(A1)", "plain <b>html</b>"]):
        d = submit_request(tiny_request(i, note=note, gpus=1), db=tiny_ledger, now=NOW)
        assert d["state"] == "admit"
    p = run_cli("export", "--what", "runs", db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert "wrote 5 runs rows" in p.stderr
    names = [r["job_name"] for r in csv.DictReader(io.StringIO(p.stdout))]
    assert names == ["'=HYPERLINK(\"http://x\")", "'+1+1", "'-2", "'@SUM(A1)", "plain <b>html</b>"]
    out = tmp_path / "runs.parquet"
    p = run_cli("export", "--what", "runs", "--format", "parquet", "--out", out, db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    raw = duckdb.sql(f"SELECT job_name FROM '{out}' ORDER BY run_id").fetchall()
    assert raw[0] == ('=HYPERLINK("http://x")',)  # Parquet is typed data: kept as it is
    out = tmp_path / "decisions.csv"
    p = run_cli("export", "--what", "decisions", "--out", out, db=tiny_ledger)
    assert p.returncode == 0 and len(out.read_text().splitlines()) == 6
    p = run_cli("export", "--format", "parquet", db=tiny_ledger)
    assert p.returncode == 2 and "--out" in p.stderr


def test_teams_syncs_the_file_and_reports_problems(tmp_path):
    db = tmp_path / "g.duckdb"
    p = run_cli("teams", db=db)
    assert p.returncode == 0, p.stderr
    assert "inserted 8" in p.stderr
    p = run_cli("teams", db=db)
    assert "unchanged 8" in p.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[teams.vision]\nreserved_gpus = -4\nmax_gpus_per_job = 8\n", encoding="utf-8")
    p = run_cli("teams", "--file", bad, db=db)
    assert p.returncode == 2
    assert "[teams.vision] reserved_gpus" in p.stderr and "[teams.vision] max_gpu_mem_gb" in p.stderr


def test_demo_builds_a_ledger_where_db_or_gate_db_points(tmp_path):
    db = tmp_path / "demo.duckdb"
    p = run_cli("--db", db, "demo", "--runs", "150", "--seed", "3")
    assert p.returncode == 0, p.stderr
    assert "inserted 150 runs" in p.stderr
    assert counts(db)["runs"] == 150
    p = run_cli("demo", "--runs", "0", db=db)
    assert p.returncode == 2


def test_import_of_bad_input_exits_2_and_writes_nothing(demo_ledger, tmp_path):
    before = counts(demo_ledger)
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    p = run_cli("import", empty, db=demo_ledger)
    assert p.returncode == 2, p.stderr
    assert "nothing written" in p.stderr
    assert counts(demo_ledger) == before


def test_a_request_nested_too_deeply_exits_2(demo_ledger):
    p = run_cli("check", "-", db=demo_ledger, stdin="[" * 100_000 + "]" * 100_000)
    assert p.returncode == 2 and "nested deeper than 64 levels" in p.stderr


def test_usage_errors_exit_2():
    p = run_cli("frobnicate")
    assert p.returncode == 2 and "invalid choice" in p.stderr


@pytest.mark.parametrize("bug", [ValueError("a bug in the gate"), KeyError("estimate"), TypeError("bad operand")])
def test_an_internal_error_is_a_gate_failure_exit_3_not_bad_input(demo_ledger, tmp_path, monkeypatch, capsys, bug):
    from lib.cli import main as cli
    from lib.ledger import deciding

    def broken(*args, **kwargs):
        raise bug
    monkeypatch.setattr(deciding, "decide_in_ledger", broken)
    code = cli.main(["--db", str(demo_ledger), "check", str(write_json(tmp_path / "r.json", demo_request())), *AT])
    assert code == cli.EXIT_FAILURE == 3
    assert f"gate failure: {type(bug).__name__}" in capsys.readouterr().err


def test_a_finish_value_the_user_got_wrong_is_input_exit_2(tiny_ledger, capsys):
    from lib.cli import main as cli
    from lib.gate.terms import InputError
    from lib.ledger.finishing import FinishInputError, finish_run
    assert issubclass(FinishInputError, InputError)
    submit_request(tiny_request(1), db=tiny_ledger, now=NOW)
    code = cli.main(["--db", str(tiny_ledger), "finish", "tiny-001", "--actual-gpu-hours", "1",
                     "--stop-reason", "completed", "--retry-gpu-hours", "2"])
    assert code == cli.EXIT_INVALID == 2
    assert "more than actual_gpu_hours" in capsys.readouterr().err
    with pytest.raises(FinishInputError, match="artifact_status"):
        finish_run("tiny-001", actual_gpu_hours=1.0, stop_reason="completed", artifact_status="shiny",
                   db=tiny_ledger)
