"""data/teams.toml's display settings: team colours (not policy) and GPU-hour prices — validated
with every problem named, synced into the ledger, and the colours used by the dashboard's figures."""
from __future__ import annotations

import colorsys
import re
from pathlib import Path

import pytest

from lib.dashboard import settings
from lib.ledger.connection import open_ledger
from lib.ledger.teams_file import (DEFAULT_TEAMS_FILE, TeamsFileError, load_teams_file, parse_teams,
                                   parse_teams_file, sync_teams)
from tests.fixtures_ledger import TINY_TEAMS, query, run_cli

SHIPPED = DEFAULT_TEAMS_FILE.read_text(encoding="utf-8")


def _problems(text: str) -> list[str]:
    with pytest.raises(TeamsFileError) as info:
        parse_teams_file(text)
    return info.value.problems


def _with_tiny(table: str = "", prices: str = "") -> str:
    """TINY_TEAMS with lines added to [teams.tiny] and a [prices] table appended."""
    text = TINY_TEAMS.replace("[teams.tiny]\n", f"[teams.tiny]\n{table}")
    return text + (f"\n[prices]\n{prices}" if prices else "")


@pytest.mark.parametrize("value, shown", [
    ('"red"', "'red'"), ('"#12345"', "'#12345'"), ('"#1234567"', "'#1234567'"), ('"#GGGGGG"', "'#GGGGGG'"),
    ('"0072B2"', "'0072B2'"), ("255", "255"), ('"<b>#000000</b>"', "'<b>#000000</b>'"),
])
def test_a_bad_colour_is_a_problem_naming_team_key_and_value(value, shown):
    problems = _problems(_with_tiny(f"colour = {value}\n"))
    assert len(problems) == 1
    assert problems[0].startswith("[teams.tiny] colour:") and shown in problems[0]


def test_a_colour_is_stored_lowercase_and_a_team_without_one_has_none():
    text = _with_tiny('colour = "#0072B2"\n') + TINY_TEAMS.split("[[snapshots]]")[0].replace(
        "[defaults]\nmax_gpu_mem_gb = 80\nmax_runtime_hours = 48\npilot_required_above_gpu_hours = 1000\n", "") \
        .replace("teams.tiny", "teams.other")
    teams = {t["team"]: t["colour"] for t in parse_teams_file(text)["teams"]}
    assert teams == {"tiny": "#0072b2", "other": None}


def test_a_colour_change_does_not_change_the_policy_version():
    plain, = parse_teams(_with_tiny())[0]
    blue, = parse_teams(_with_tiny('colour = "#0072B2"\n'))[0]
    black, = parse_teams(_with_tiny('colour = "#000000"\n'))[0]
    assert plain["policy_version"] == blue["policy_version"] == black["policy_version"]
    budget, = parse_teams(_with_tiny().replace("monthly_budget_gpu_hours = 100000",
                                               "monthly_budget_gpu_hours = 99999"))[0]
    assert budget["policy_version"] != plain["policy_version"]   # a policy change still does


@pytest.mark.parametrize("prices, key, shown", [
    ('currency = "usd"\nstable = 2.5\n', "currency", "'usd'"),
    ('currency = "US"\nstable = 2.5\n', "currency", "'US'"),
    ('currency = "DOLLARS"\n', "currency", "'DOLLARS'"),
    ('currency = 840\n', "currency", "840"),
    ('currency = "USD"\nstable = -2.5\n', "stable", "-2.5"),
    ('currency = "USD"\npreemptible = nan\n', "preemptible", "nan"),
    ('currency = "USD"\nstable = inf\n', "stable", "inf"),
    ('currency = "USD"\nstable = "2.50"\n', "stable", "'2.50'"),
    ('currency = "USD"\nstable = true\n', "stable", "True"),
    ('currency = "USD"\nspot = 0.5\n', "spot", "0.5"),
])
def test_a_bad_price_table_is_a_problem_naming_key_and_value(prices, key, shown):
    problems = _problems(_with_tiny(prices=prices))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"[prices] {key}:") and shown in problems[0]


def test_a_price_needs_a_currency_and_every_problem_is_listed_at_once():
    problems = _problems(_with_tiny('colour = "blue"\n', 'stable = -1\nspot = 2\n'))
    assert [p.split(":")[0] for p in problems] == [
        "[teams.tiny] colour", "[prices] spot", "[prices] stable", "[prices] currency"]


def test_prices_are_optional_each_on_its_own():
    assert parse_teams_file(_with_tiny())["prices"] == {"currency": None, "per_gpu_hour": {}}
    assert parse_teams_file(_with_tiny(prices='currency = "EUR"\npreemptible = 0\n'))["prices"] == \
        {"currency": "EUR", "per_gpu_hour": {"preemptible": 0.0}}


def test_the_shipped_file_gives_every_team_a_distinct_colour_and_example_prices():
    parsed = load_teams_file()
    colours = [t["colour"] for t in parsed["teams"]]
    assert all(c and re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours)
    assert len(set(colours)) == len(colours) == 8
    for c in colours:   # none black or grey: the charts draw totals and reference lines in those
        _, _, saturation = colorsys.rgb_to_hls(*(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)))
        assert saturation > 0.3, c
    assert parsed["prices"] == {"currency": "USD", "per_gpu_hour": {"stable": 2.5, "preemptible": 0.9}}
    assert "EXAMPLE" in SHIPPED   # the prices say they are examples to edit


def test_sync_stores_colours_and_prices_and_a_recolour_updates_only_the_colour(tmp_path):
    db, f = tmp_path / "g.duckdb", tmp_path / "t.toml"
    f.write_text(_with_tiny('colour = "#0072B2"\n', 'currency = "EUR"\nstable = 3\npreemptible = 1\n'),
                 encoding="utf-8")
    with open_ledger(db) as con:
        sync_teams(con, f)
    assert settings.colours(db) == {"tiny": "#0072b2"}
    assert settings.prices(db) == {"currency": "EUR", "per_gpu_hour": {"stable": 3.0, "preemptible": 1.0}}
    version = query(db, "SELECT policy_version FROM teams")
    f.write_text(_with_tiny('colour = "#D55E00"\n', 'currency = "EUR"\nstable = 3\n'), encoding="utf-8")
    with open_ledger(db) as con:
        counts = sync_teams(con, f)
    assert counts["teams_updated"] == 1 and counts["prices"] == 1
    assert settings.colours(db) == {"tiny": "#d55e00"}
    assert settings.prices(db)["per_gpu_hour"] == {"stable": 3.0}   # a price taken out of the file is gone
    assert query(db, "SELECT policy_version FROM teams") == version


def test_the_teams_command_refuses_a_bad_file_with_every_problem_and_leaves_the_ledger_unchanged(tmp_path):
    db, f = tmp_path / "g.duckdb", tmp_path / "t.toml"
    f.write_text(_with_tiny('colour = "#0072B2"\n', 'currency = "USD"\nstable = 2.5\n'), encoding="utf-8")
    assert run_cli("teams", "--file", f, db=db).returncode == 0
    before = [query(db, f"SELECT * FROM {t} ORDER BY ALL") for t in ("teams", "snapshots", "prices")]
    f.write_text(_with_tiny('colour = "#00f"\nreserved_gpus = 4\n',
                            'currency = "usd"\nstable = nan\npreemptible = -0.5\nspot = 1\n')
                 .replace("reserved_gpus = 8\n", ""), encoding="utf-8")
    p = run_cli("teams", "--file", f, db=db)
    assert p.returncode == 2
    for text in ("[teams.tiny] colour", "'#00f'", "[prices] currency", "'usd'", "[prices] stable", "nan",
                 "[prices] preemptible", "-0.5", "[prices] spot"):
        assert text in p.stderr, (text, p.stderr)
    assert [query(db, f"SELECT * FROM {t} ORDER BY ALL") for t in ("teams", "snapshots", "prices")] == before


def test_a_file_without_colours_or_prices_still_loads(tmp_path):
    # a teams file written before colours and prices existed loads unchanged (both are optional)
    old = Path(tmp_path / "old.toml")
    without = re.sub(r"(?ms)^\[prices\]\n.*?\n\n", "", re.sub(r"(?m)^colour = .*\n", "", SHIPPED))
    assert "colour =" not in without and "[prices]" not in without
    old.write_text(without, encoding="utf-8")
    parsed = load_teams_file(old)
    assert all(t["colour"] is None for t in parsed["teams"]) and parsed["prices"]["per_gpu_hour"] == {}
    assert [t["policy_version"] for t in parsed["teams"]] == [t["policy_version"] for t in load_teams_file()["teams"]]


# ------------------------------------------------------------------------ the dashboard's colours

def _trace_colours(at) -> dict[str, str]:
    """{team: marker colour} of Overview's reserved-vs-used chart, as the browser receives it."""
    import json
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return {d["name"].removesuffix(" used"): d["marker"]["color"] for d in spec["data"]
            if d.get("name", "").endswith(" used")}


@pytest.mark.usefixtures("fresh_caches")
def test_the_dashboard_draws_each_team_in_its_toml_colour_and_follows_a_recolour(page_ledger, tmp_path):
    from streamlit.testing.v1 import AppTest

    from lib.dashboard import figure_kit
    from tests.fixtures_app import ROOT, page_script
    path, _ = page_ledger
    with open_ledger(path) as con:
        sync_teams(con)                                    # the shipped file: every team has a colour
        con.execute("UPDATE teams SET colour = NULL WHERE team = 'speech'")
    toml = {t["team"]: t["colour"] for t in load_teams_file()["teams"]}
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(page_script("overview")).run()
    assert not at.exception, [e.value for e in at.exception]
    drawn = _trace_colours(at)
    assert set(drawn) == {"nlp-research", "safety", "speech", "vision"}
    assert drawn == {**{t: toml[t] for t in drawn}, "speech": figure_kit.hashed_colour("speech")}
    recoloured = tmp_path / "recoloured.toml"
    recoloured.write_text(re.sub(r'(\[teams\.vision\]\n)colour = "[^"]*"', r'\1colour = "#123456"', SHIPPED),
                          encoding="utf-8")
    with open_ledger(path) as con:
        sync_teams(con, recoloured)
    at.run()
    assert _trace_colours(at)["vision"] == "#123456"   # a new ledger version: the chart is redrawn
