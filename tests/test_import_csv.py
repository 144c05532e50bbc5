"""CSV import of run history: format, every bad input reported with line/column/value, upsert rules."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.ledger.imports import CSV_COLUMNS, import_runs
from tests.fixtures_imports import GOOD, HEADER, dump, make_import_ledger, runs



def test_template_imports(import_ledger):
    from pathlib import Path
    template = Path(__file__).resolve().parent.parent / "data" / "runs_template.csv"
    assert template.read_text().splitlines()[0].split(",") == CSV_COLUMNS
    r = import_runs(template, db=import_ledger, create_teams=True)
    assert r.errors == [] and r.inserted == 3 and r.written
    assert set(r.teams_created) == {"nlp-research", "ranking"}   # import_ledger holds vision, nlp


def test_import_then_reimport_changes_nothing(import_ledger):
    r = import_runs(GOOD.encode(), db=import_ledger)
    assert (r.inserted, r.updated, r.unchanged, r.errors) == (2, 0, 0, [])
    assert r.preview is not None and list(r.preview.run_id) == ["r1", "r2"]
    before = dump(import_ledger)
    r = import_runs(GOOD.encode(), db=import_ledger)
    assert (r.inserted, r.updated, r.unchanged) == (0, 0, 2)
    assert dump(import_ledger) == before


def test_changed_row_counts_updated_and_empty_cells_keep_ledger_values(import_ledger):
    import_runs(GOOD.encode(), db=import_ledger)
    # a file of actuals only: estimate column absent, job_name empty -> both kept
    actuals = ("run_id,team,kind,gpus,actual_gpu_hours,ended_at,job_name,stop_reason\n"
               "r2,nlp,exploratory,1,3.5,2024-05-02T14:00:00Z,,completed\n"
               "r1,vision,production,2,,,,\n")
    r = import_runs(actuals.encode(), db=import_ledger)
    assert (r.inserted, r.updated, r.unchanged, r.errors) == (0, 1, 1, [])
    row = runs(import_ledger)["r2"]
    assert row["estimated_gpu_hours"] == 4 and row["estimate_source"] == "stated"
    assert row["actual_gpu_hours"] == 3.5 and row["job_name"] == "b" and row["stop_reason"] == "completed"
    assert row["source"] == "csv"


def test_an_empty_capacity_cell_takes_the_documented_default_for_a_new_run(import_ledger):
    data = ("run_id,team,kind,gpus,capacity\n"
            "c1,vision,production,2,\n"
            "c2,vision,production,2,preemptible\n")
    r = import_runs(data.encode(), db=import_ledger)
    assert (r.inserted, r.errors) == (2, [])
    assert runs(import_ledger)["c1"]["capacity"] == "stable" and runs(import_ledger)["c2"]["capacity"] == "preemptible"


def test_bom_crlf_quoted_commas_and_newlines(import_ledger):
    data = ("\ufeff" + HEADER + "\r\n"
            'q1,vision,production,2,1,,,,"a, b\r\nsecond line"\r\n'
            'q2,vision,production,2,1,,,,"say ""hi"""\r\n').encode("utf-8")
    r = import_runs(data, db=import_ledger)
    assert r.errors == [] and r.inserted == 2
    assert runs(import_ledger)["q1"]["job_name"] == "a, b\r\nsecond line"
    assert runs(import_ledger)["q2"]["job_name"] == 'say "hi"'


def test_utc_offsets_are_converted(import_ledger):
    data = HEADER + "\nz1,vision,production,2,1,,2024-05-01T12:00:00+02:00,2024-05-01T11:00:00Z,\n"
    assert import_runs(data.encode(), db=import_ledger).errors == []
    row = runs(import_ledger)["z1"]
    assert str(row["started_at"]) == "2024-05-01 10:00:00"


def _one_bad(import_ledger, text: bytes):
    before = dump(import_ledger)
    r = import_runs(text, db=import_ledger)
    assert r.errors, "expected an error"
    assert not r.written and (r.inserted, r.updated, r.unchanged) == (0, 0, 0)
    assert dump(import_ledger) == before
    return r.errors


BAD_CASES = [
    # (name, file bytes, expected line, column, value or None, text in message)
    ("empty", b"", 1, None, None, "empty"),
    ("header only", (HEADER + "\n").encode(), 2, None, None, "no rows"),
    ("truncated last line", (GOOD + "r3,nlp,explo").encode(), 4, "gpus", None, "fields"),
    ("unterminated quote", (GOOD + 'r3,nlp,exploratory,1,1,,,,"abc').encode(), 4, "job_name", None, "not closed"),
    ("semicolons", GOOD.replace(",", ";").encode(), 1, None, None, "semicolons"),
    ("missing column", b"run_id,team,kind\nr1,vision,production\n", 1, "gpus", None, "missing"),
    ("renamed column", GOOD.replace("actual_gpu_hours", "actual_hours").encode(), 1, "actual_hours",
     "actual_hours", "did you mean 'actual_gpu_hours'"),
    ("extra column", GOOD.replace("job_name", "job_name,colour").replace(",a\n", ",a,red\n").encode(),
     1, "colour", "colour", "unknown column"),
    ("too many fields", (GOOD + "r3,nlp,exploratory,1,1,,,,x,y\n").encode(), 4, None, None, "more fields"),
    ("non-numeric", (GOOD + "r3,nlp,exploratory,1,ten,,,,\n").encode(), 4, "estimated_gpu_hours", "ten", "not a number"),
    ("negative", (GOOD + "r3,nlp,exploratory,1,-1,,,,\n").encode(), 4, "estimated_gpu_hours", "-1", "negative"),
    ("NaN", (GOOD + "r3,nlp,exploratory,1,NaN,,,,\n").encode(), 4, "estimated_gpu_hours", "NaN", "finite"),
    ("inf", (GOOD + "r3,nlp,exploratory,1,1,inf,,,\n").encode(), 4, "actual_gpu_hours", "inf", "finite"),
    ("fractional gpus", (GOOD + "r3,nlp,exploratory,2.5,1,,,,\n").encode(), 4, "gpus", "2.5", "whole number"),
    ("impossible date", (GOOD + "r3,nlp,exploratory,1,1,,2024-02-30T00:00:00Z,,\n").encode(), 4, "started_at",
     "2024-02-30T00:00:00Z", "date-time"),
    ("far date", (GOOD + "r3,nlp,exploratory,1,1,,1999-01-01,,\n").encode(), 4, "started_at", "1999-01-01", "2000"),
    ("end before start", (GOOD + "r3,nlp,exploratory,1,1,,2024-05-02T00:00:00Z,2024-05-01T00:00:00Z,\n").encode(),
     4, "ended_at", None, "before started_at"),
    ("duplicate run id", (GOOD + "r1,nlp,exploratory,1,1,,,,\n").encode(), 4, "run_id", "r1", "line 2"),
    ("unknown team", (GOOD + "r3,ghosts,exploratory,1,1,,,,\n").encode(), 4, "team", "ghosts", "unknown team"),
    ("bad kind", (GOOD + "r3,nlp,Production,1,1,,,,\n").encode(), 4, "kind", "Production", "one of"),
    ("empty run id", (GOOD + ",nlp,exploratory,1,1,,,,\n").encode(), 4, "run_id", None, "required"),
    ("1 MB field", (GOOD + "r3,nlp,exploratory,1,1,,,," + "x" * 1_000_000 + "\n").encode(), 4, "job_name",
     None, "longer than 1000"),
    ("non-UTF-8", GOOD.encode() + "r3,nlp,exploratory,1,1,,,,caf\xe9\n".encode("latin-1"), 4, "job_name", None, "UTF-8"),
    ("non-UTF-8 header", b"run_id,t\xe9am\n", 1, None, None, "UTF-8"),
]


@pytest.mark.parametrize("name,data,line,column,value,text", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_is_reported_and_ledger_unchanged(import_ledger, name, data, line, column, value, text):
    import_runs(GOOD.replace("r1,", "base1,").replace("r2,", "base2,").encode(), db=import_ledger)
    errors = _one_bad(import_ledger, data)
    hit = [e for e in errors if e["line"] == line and e["column"] == column and text in e["message"]]
    assert hit, errors
    if value is not None:
        assert hit[0]["value"] == value
    assert all(set(e) == {"line", "column", "value", "message"} for e in errors)


def test_all_errors_listed_not_just_the_first(import_ledger):
    data = HEADER + "\n" + "".join(f"x{i},nlp,exploratory,-{i + 1},1,,,,\n" for i in range(5))
    errors = _one_bad(import_ledger, data.encode())
    assert [e["line"] for e in errors] == [2, 3, 4, 5, 6]


def test_error_list_is_capped_with_a_summary(import_ledger):
    data = HEADER + "\n" + "".join(f"x{i},nlp,exploratory,-1,1,,,,\n" for i in range(1500))
    errors = _one_bad(import_ledger, data.encode())
    assert len(errors) == 1001 and errors[-1]["line"] is None and "500 more" in errors[-1]["message"]


def test_line_numbers_count_quoted_newlines(import_ledger):
    data = (HEADER + "\n"
            'm1,nlp,exploratory,1,1,,,,"one\ntwo\nthree"\n'
            "m2,nlp,exploratory,-1,1,,,,\n")
    errors = _one_bad(import_ledger, data.encode())
    assert errors[0]["line"] == 5 and errors[0]["column"] == "gpus"


def test_formula_html_and_sql_are_stored_as_plain_text(import_ledger):
    texts = ["=HYPERLINK(\"http://x\")", "+1+2", "-3", "@SUM(A1)", "<script>alert(1)</script>",
             "x'); DROP TABLE runs; --"]
    body = "".join(f'f{i},nlp,exploratory,1,1,,,,"{t.replace(chr(34), chr(34) * 2)}"\n' for i, t in enumerate(texts))
    r = import_runs((HEADER + "\n" + body).encode(), db=import_ledger)
    assert r.errors == []
    stored = runs(import_ledger)
    assert [stored[f"f{i}"]["job_name"] for i in range(len(texts))] == texts


def test_unknown_team_created_on_request(import_ledger):
    data = GOOD + "r3,ghosts,exploratory,1,1,,,,\nr4,ghosts,exploratory,1,1,,,,\n"
    r = import_runs(data.encode(), db=import_ledger, create_teams=True)
    assert r.errors == [] and r.teams_created == ["ghosts"] and r.inserted == 4
    from lib.ledger.connection import open_ledger
    with open_ledger(import_ledger, read_only=True) as con:
        team = con.execute("SELECT max_gpus_per_job, monthly_budget_gpu_hours, policy_version FROM teams "
                           "WHERE team = 'ghosts'").fetchone()
    assert team == (0, 0.0, "import-placeholder")


def test_dry_run_previews_and_writes_nothing(import_ledger):
    before = dump(import_ledger)
    r = import_runs(GOOD.encode(), db=import_ledger, dry_run=True)
    assert r.errors == [] and r.inserted == 2 and not r.written and len(r.preview) == 2
    assert dump(import_ledger) == before


def test_progress_is_reported(import_ledger):
    seen = []
    import_runs(GOOD.encode(), db=import_ledger, progress=lambda f, m: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)


def test_size_limit(import_ledger, monkeypatch):
    import lib.ledger.imports as importer
    monkeypatch.setattr(importer, "MAX_IMPORT_BYTES", 100)
    errors = _one_bad(import_ledger, (GOOD * 3).encode())
    assert "larger than the import limit" in errors[0]["message"]


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=60).filter(lambda s: s.strip() == s and s.strip())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=_text, snap=_text)
def test_random_text_round_trips(tmp_path_factory, job, snap):
    import_ledger = make_import_ledger(tmp_path_factory.mktemp("h"))
    q = lambda s: '"' + s.replace('"', '""') + '"'  # noqa: E731
    data = f"run_id,team,kind,gpus,job_name,data_snapshot\nh1,nlp,exploratory,1,{q(job)},{q(snap)}\n"
    r = import_runs(data.encode("utf-8"), db=import_ledger)
    assert r.errors == []
    row = runs(import_ledger)["h1"]
    assert (row["job_name"], row["data_snapshot"]) == (job, snap)


def test_an_import_may_add_actuals_to_an_admitted_run_but_never_change_what_was_judged(import_ledger):
    from lib.ledger.connection import open_ledger
    with open_ledger(import_ledger) as con:  # a reservation as lib.ledger.deciding.submit_request records it
        con.execute("INSERT INTO runs (run_id, team, kind, gpus, reserved_gpu_hours, source, updated_at) "
                    "VALUES ('adm-1', 'vision', 'production', 2, 10.0, 'submit', now())").fetchall()
    before = dump(import_ledger)
    moved = "run_id,team,kind,gpus\nadm-1,nlp,production,64\n"
    r = import_runs(moved.encode(), db=import_ledger)
    assert {(e["line"], e["column"], e["value"]) for e in r.errors} == {(2, "team", "nlp"), (2, "gpus", "64")}
    assert "admitted" in r.errors[0]["message"] and dump(import_ledger) == before
    actuals = "run_id,team,kind,gpus,actual_gpu_hours\nadm-1,vision,production,2,9.5\n"
    r = import_runs(actuals.encode(), db=import_ledger)
    assert (r.updated, r.errors) == (1, []) and runs(import_ledger)["adm-1"]["actual_gpu_hours"] == 9.5
