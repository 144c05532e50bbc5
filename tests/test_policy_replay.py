"""Policy replay over a ledger (lib.ledger.replay, `python -m lib replay`, the Policy replay page).

The ledger is made by real `submit` and `finish` calls (fixture `submitted_ledger`): replaying it
under the policy it was decided under must give back every recorded decision, state and reasons.
"""
from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from lib.ledger.replay import kept_file, ledger_teams_file, replay_ledger
from lib.ledger.teams_file import DEFAULT_TEAMS_FILE, POLICY_FIELDS, TeamsFileError, parse_teams, parse_teams_file
from lib.ledger.teams_proposal import propose, teams_text
from lib.planning.replay.passes import NOT_SENT
from tests.fixtures_app import fill_ledger
from tests.fixtures_ledger import query, run_cli
from tests.fixtures_replay import REPLAY_TEAMS


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def window(first, last) -> dict:
    return {"start": first - timedelta(hours=1), "end": last + timedelta(hours=1)}


def test_replaying_under_the_recorded_policy_reproduces_every_recorded_decision(submitted_ledger):
    db, first, last = submitted_ledger
    recorded = query(db, "SELECT count(*), list(DISTINCT code) FROM decisions, unnest(reason_codes) AS u(code)")
    result = replay_ledger(db, **window(first, last))
    assert result["requests"] == query(db, "SELECT count(*) FROM decisions")[0][0] > 50
    assert result["excluded"]["count"] == 0
    assert result["changed_requests"] == [] and result["changed"] == {}
    assert result["agreement"] == 1.0 and result["reason_agreement"] == 1.0
    assert result["proposed"] == result["recorded"]
    # the history is not trivial: deferrals for capacity, both budgets and the line (each kept while
    # another request of its team waited), and finished runs between
    assert {"capacity", "budget", "period-budget", "retraining-protection", "queue"} <= set(recorded[0][1])
    assert query(db, "SELECT count(*) FROM runs WHERE ended_at IS NOT NULL")[0][0] >= 15
    priced = [json.loads(d)["estimate"]["interruptions"] for (d,) in query(
        db, "SELECT decision_json FROM decisions WHERE decision_json LIKE '%\"interruptions\"%'")]
    assert sum(1 for i in priced if i["rate"] and i["used"] > i["stated"]) >= 5   # the ledger's rate priced
    for team in result["teams"]:   # reservations equal to the recorded ones: the estimates match too
        assert team["proposed"]["reserved_gpu_hours"] == team["recorded"]["reserved_gpu_hours"] > 0
    for team in result["teams"]:
        assert team["proposed"] == team["recorded"]


def test_a_smaller_quota_changes_decisions_and_says_which(submitted_ledger):
    db, first, last = submitted_ledger
    teams, _ = parse_teams(REPLAY_TEAMS)
    alpha = next(t for t in teams if t["team"] == "alpha")
    alpha["reserved_gpus"] = 2
    result = replay_ledger(db, [alpha], **window(first, last))
    assert result["agreement"] < 1.0
    assert any(c["team"] == "alpha" for c in result["changed_requests"])
    by_team = {t["team"]: t for t in result["teams"]}
    assert by_team["alpha"]["proposed"]["deferrals_by_reason"].get("capacity", 0) > \
        by_team["alpha"]["recorded"]["deferrals_by_reason"].get("capacity", 0)
    assert by_team["alpha"]["proposed"]["admit"] < by_team["alpha"]["recorded"]["admit"]


def test_daily_calibration_computes_less_and_says_so(submitted_ledger):
    db, first, last = submitted_ledger
    exact = replay_ledger(db, refresh="exact", **window(first, last))
    daily = replay_ledger(db, refresh="daily", **window(first, last))
    assert (exact["calibration_refresh"], daily["calibration_refresh"]) == ("exact", "daily")
    assert daily["calibrations_computed"] < exact["calibrations_computed"]


def test_the_calibration_level_is_a_proposable_setting(submitted_ledger):
    """A 0.97 bound needs 33 runs instead of 9, so production runs are judged at the median for
    longer: decisions change (in either direction), and the level is reported."""
    db, first, last = submitted_ledger
    teams, _ = parse_teams(REPLAY_TEAMS)
    high = replay_ledger(db, teams, levels={t["team"]: 0.97 for t in teams}, **window(first, last))
    assert high["calibration_level"] == {"alpha": 0.97, "beta": 0.97, "gamma": 0.97}
    assert high["changed_requests"] and high["agreement"] < 1.0


def test_replay_never_writes_the_ledger(submitted_ledger, tmp_path):
    db, first, last = submitted_ledger
    policy = tmp_path / "proposed.toml"
    policy.write_text(REPLAY_TEAMS, encoding="utf-8")
    before = digest(db)
    files = sorted(p.name for p in db.parent.iterdir())
    replay_ledger(db, **window(first, last))
    assert run_cli("replay", "--policy", policy, db=db).returncode == 0
    assert digest(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == files


def test_requests_replay_cannot_know_are_excluded_with_the_reason(submitted_ledger):
    db, first, last = submitted_ledger
    con = duckdb.connect(str(db))
    try:
        ids = [r[0] for r in con.execute("SELECT decision_id FROM decisions ORDER BY decision_id LIMIT 3").fetchall()]
        con.execute("UPDATE decisions SET request_json = '' WHERE decision_id = ?", [ids[0]])
        con.execute("UPDATE decisions SET request_json = '[1, 2]' WHERE decision_id = ?", [ids[1]])
        con.execute("""UPDATE decisions SET request_json = json_object('team', team, 'kind', kind)::VARCHAR
                       WHERE decision_id = ?""", [ids[2]])
        gamma = con.execute("SELECT count(*) FROM decisions WHERE team = 'gamma'").fetchone()[0]
        con.execute("DELETE FROM teams WHERE team = 'gamma'")
    finally:
        con.close()
    result = replay_ledger(db, **window(first, last))
    why = {e["decision_id"]: e["why"] for e in result["excluded"]["requests"]}
    assert why[ids[0]] == "no request JSON recorded"
    assert why[ids[1]] == "the recorded request JSON is not a JSON object"
    assert why[ids[2]].startswith("the recorded request is not a complete request")
    assert "run_id" in why[ids[2]] and "gpus" in why[ids[2]]
    no_policy = [w for w in why.values() if w.startswith("team 'gamma' has no policy")]
    assert len(no_policy) >= gamma - 3 > 0
    assert result["excluded"]["count"] == len(why) == result["requests"] - result["replayable"]
    assert sum(result["recorded"].values()) == result["replayable"]
    assert result["agreement"] == 1.0   # the rest still reproduces: exclusions are never counted


def test_a_ledger_of_incomplete_requests_is_all_excluded_and_has_no_agreement(tmp_path):
    db = tmp_path / "filled.duckdb"
    now = fill_ledger(db, n_runs=60)
    result = replay_ledger(db, start=now - timedelta(days=200), end=now + timedelta(hours=1))
    assert result["requests"] > 0 and result["replayable"] == 0
    assert result["agreement"] is None and result["excluded"]["count"] == result["requests"]


def test_the_command_line_prints_the_replay_as_json(submitted_ledger, tmp_path):
    db, first, last = submitted_ledger
    policy = tmp_path / "proposed.toml"
    policy.write_text(REPLAY_TEAMS.replace("reserved_gpus = 8", "reserved_gpus = 3"), encoding="utf-8")
    out = run_cli("replay", "--policy", policy, "--from", first.date().isoformat(), "--to",
                  last.date().isoformat(), db=db)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    for key in ("requests", "recorded", "proposed", "agreement", "excluded", "teams"):
        assert key in result
    assert set(result["recorded"]) >= {"admit", "defer"} and set(result["proposed"]) >= {"admit", "defer"}
    assert result["requests"] == query(db, "SELECT count(*) FROM decisions")[0][0]
    assert 0 < result["agreement"] < 1
    assert "replay:" in out.stderr and "nothing written" in out.stderr


def test_the_command_line_refuses_a_bad_policy_file_listing_every_problem(submitted_ledger, tmp_path):
    db, _, _ = submitted_ledger
    policy = tmp_path / "bad.toml"
    policy.write_text('[teams.alpha]\nreserved_gpus = -1\nmax_gpus_per_job = "x"\nbogus = 1\n'
                      '[teams."no good"]\nreserved_gpus = 2\n', encoding="utf-8")
    out = run_cli("replay", "--policy", policy, db=db)
    assert out.returncode == 2 and out.stdout == ""
    for problem in ("reserved_gpus: must be ≥ 0", "max_gpus_per_job: must be a number", "bogus: unknown key",
                    "max_runtime_hours: required", "team name 'no good' is not valid"):
        assert problem in out.stderr, out.stderr
    for args in (["--policy", tmp_path / "missing.toml"], ["--policy", policy, "--calibration-level", "1.5"],
                 ["--policy", tmp_path / "missing.toml", "--from", "2026-11-02", "--to", "2026-11-01"]):
        assert run_cli("replay", *args, db=db).returncode == 2


def test_the_proposed_policy_file_round_trips_through_the_teams_file_parser():
    parsed = parse_teams_file(DEFAULT_TEAMS_FILE.read_text(encoding="utf-8"))
    text = teams_text(parsed["teams"], parsed["snapshots"], parsed["prices"])
    assert parse_teams_file(text) == parsed
    odd = {**parsed["teams"][0], "team": "a.b_c-9", "preemptible_partitions": ["spot \"x\"", "back\\slash", "tab\t"]}
    (got,), _ = parse_teams(teams_text([odd]))
    assert {k: got[k] for k in ("team", *POLICY_FIELDS)} == {
        **{k: odd[k] for k in ("team", *POLICY_FIELDS)}, "preemptible_partitions": sorted(odd["preemptible_partitions"])}


def test_propose_applies_edits_with_new_versions_and_lists_every_problem(submitted_ledger):
    db, _, _ = submitted_ledger
    policies, _, _ = ledger_teams_file(db)
    proposed = {t["team"]: t for t in propose(policies, {"alpha": {"reserved_gpus": 12}})}
    assert proposed["alpha"]["reserved_gpus"] == 12
    assert proposed["alpha"]["policy_version"] != policies["alpha"]["policy_version"]
    assert proposed["beta"]["policy_version"] == policies["beta"]["policy_version"]
    with pytest.raises(TeamsFileError) as info:
        propose(policies, {"beta": {"retraining_reserved_gpus": 9}, "gamma": {"max_runtime_hours": -2.0}})
    assert len(info.value.problems) == 2


def open_replay_page(db, monkeypatch):
    from tests.test_app_pages import open_app
    monkeypatch.setenv("GATE_DB", str(db))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = open_app("policy_replay")
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_replays_an_edited_policy_and_offers_it_as_teams_toml(submitted_ledger, monkeypatch, fresh_caches):
    db, first, last = submitted_ledger
    at = open_replay_page(db, monkeypatch)
    assert at.title[0].value == "Policy replay" and not at.metric   # nothing replayed before the button
    at.multiselect(key="pr_teams").set_value(["alpha"]).run()
    at.date_input(key="pr_window").set_value((first.date(), last.date())).run()
    at.number_input(key="pr_reserved_gpus|alpha").set_value(2)   # in the form: sent with its button
    next(b for b in at.button if b.label == "Replay").click().run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests in the window"] == str(query(db, "SELECT count(*) FROM decisions")[0][0])
    assert metrics["Same decision as recorded"] != "100.0%"
    # all that is left out: retries of runs the proposal admitted at an earlier request, each listed
    left_out = next(df.value for df in at.dataframe if "why" in df.value.columns)
    assert set(left_out["why"]) <= {NOT_SENT} and metrics["Excluded"] == str(len(left_out))
    assert metrics["Baseline decides as recorded"] == "100.0%"
    assert int(metrics["Decisions the proposal changes"]) > 0
    tables = [df.value for df in at.dataframe]
    effect = tables[0]   # the page leads with proposal - baseline
    assert list(effect.columns) == ["team", "measure", "unit", "baseline", "proposed", "difference"]
    alpha = effect[(effect["team"] == "alpha") & (effect["measure"] == "admitted")].iloc[0]
    assert alpha["difference"] < 0 and alpha["difference"] == alpha["proposed"] - alpha["baseline"]
    others = effect[(effect["team"] != "alpha") & (effect["unit"] == "decisions")]
    assert len(others) > 0
    per_team = tables[1]
    assert set(per_team["team"]) == {"alpha", "beta", "gamma"} and "deferred for capacity" in set(per_team["measure"])
    assert {"recorded", "baseline", "proposed"} <= set(per_team.columns)
    assert len(tables[2]) > 0 and set(tables[2]["team"]) >= {"alpha"}        # the decisions that change
    assert len(at.get("plotly_chart")) >= 2                                  # the effect's charts
    toml = at.session_state["pr_toml"]
    proposed = {t["team"]: t for t in parse_teams(toml)[0]}
    assert proposed["alpha"]["reserved_gpus"] == 2 and proposed["beta"]["reserved_gpus"] == 6
    # the passes the proposal does not change are kept beside the ledger: the same replay again reads them
    assert kept_file(db).exists()
    next(b for b in at.button if b.label == "Replay").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.dataframe[0].value.equals(effect)


def test_the_page_window_defaults_to_the_sidebar_period(submitted_ledger, monkeypatch, fresh_caches):
    db, _, _ = submitted_ledger
    at = open_replay_page(db, monkeypatch)
    sidebar = [d for d in at.sidebar.date_input]
    assert sidebar, "the sidebar has a period"
    assert tuple(at.date_input(key="pr_window").value) == tuple(sidebar[0].value)


def test_an_unchanged_proposal_is_replayed_once_and_shows_no_effect(submitted_ledger, monkeypatch, fresh_caches):
    db, first, last = submitted_ledger
    at = open_replay_page(db, monkeypatch)
    at.date_input(key="pr_window").set_value((first.date(), last.date())).run()
    next(b for b in at.button if b.label == "Replay").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["pr_result"]["baseline_is_proposed"] is True
    assert any("replayed once" in i.value for i in at.info)
    effect = at.dataframe[0].value
    assert (effect["difference"].dropna() == 0).all()


def test_the_page_finds_the_smallest_pool_meeting_a_target(pooled_submitted_ledger, monkeypatch, fresh_caches):
    """The N the page finds meets the target and N - 1 does not, each checked by replaying the window
    (more accelerators need not lower the deferral share everywhere: more admits spend budgets sooner)."""
    from lib.ledger.replay import read_window
    from lib.planning.replay.passes import replay_proposal
    from lib.planning.replay.search import meets
    db, first, last = pooled_submitted_ledger
    start, end = first.replace(hour=0, minute=0, second=0, microsecond=0), last.replace(
        hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    requests, world, policies, _ = read_window(db, start=start, end=end)
    share_at = {n: replay_proposal(requests, policies, world, pools={"stable": n})["overall"]["deferral_share"]
                for n in (0, 18)}
    assert share_at[0] > share_at[18]   # no stable accelerators at all defers most
    limit = (share_at[0] + share_at[18]) / 2
    at = open_replay_page(db, monkeypatch)
    at.date_input(key="pr_window").set_value((first.date(), last.date())).run()
    at.selectbox(key="pr_capacity").set_value("stable")
    at.selectbox(key="pr_target").set_value("deferral_share").run()
    at.number_input(key="pr_limit").set_value(limit * 100)
    at.button(key="pr_search_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    found = at.session_state["pr_search"]["found"]
    assert found is not None and 0 < found <= 18
    target = {"measure": "deferral_share", "limit": limit}
    assert meets(replay_proposal(requests, policies, world, pools={"stable": found})["overall"], target)
    assert not meets(replay_proposal(requests, policies, world, pools={"stable": found - 1})["overall"], target)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[next(k for k in metrics if k.startswith("Smallest stable pool"))] == f"{found:,} GPUs"
    assert metrics["Today's stable pool"] == "12 GPUs"
    rows = at.session_state["pr_search"]["rows"]
    assert found in set(rows["pool_gpus"]) and 12 in set(rows["pool_gpus"])
    assert {"alpha", "beta", "gamma"} <= set(rows["team"])


def test_the_page_lists_every_problem_of_an_invalid_proposal(submitted_ledger, monkeypatch, fresh_caches):
    db, _, _ = submitted_ledger
    at = open_replay_page(db, monkeypatch)
    at.multiselect(key="pr_teams").set_value(["beta"]).run()
    at.number_input(key="pr_retraining_reserved_gpus|beta").set_value(9)
    next(b for b in at.button if b.label == "Replay").click().run()
    assert not at.exception
    shown = at.error[0].value.replace("\\", "").replace("\u2060", "")
    assert "[teams.beta] retraining_reserved_gpus: 9 is more than reserved_gpus 6" in shown
    assert not at.metric


def test_the_page_recommends_quota_cuts_and_offers_them_as_teams_toml(submitted_ledger, monkeypatch, fresh_caches):
    db, first, last = submitted_ledger
    at = open_replay_page(db, monkeypatch)
    at.date_input(key="pr_window").set_value((first.date(), last.date())).run()
    at.button(key="pr_sizing_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    rows = at.session_state["pr_sizing"]["rows"]
    assert set(rows["team"]) == {"alpha", "beta", "gamma"}
    shown = [df.value for df in at.dataframe if "give_back_gpus" in df.value.columns]
    assert shown and list(shown[0]["team"]) == list(rows["team"])
    proposed = {t["team"]: t for t in parse_teams(at.session_state["pr_sizing_toml"])[0]}
    for _, r in rows.iterrows():
        assert proposed[r["team"]]["reserved_gpus"] == r["quota_gpus"] - r["give_back_gpus"]
    assert any(b.label == "Download the cut as a teams.toml proposal" for b in at.get("download_button"))


def test_a_pass_whose_pool_never_ran_short_replays_the_same_down_to_its_need(pooled_submitted_ledger):
    """The search's shortcut: with every quota's worth of stable accelerators the pool never lacks room,
    and a pool of exactly the most any request needed decides everything the same, waits included.
    One accelerator fewer runs short. The search answers as a plain scan over every size would."""
    from lib.ledger.replay import read_window
    from lib.planning.replay.passes import replay_proposal
    from lib.planning.replay.search import meets, search_ceiling, smallest_pool
    db, first, last = pooled_submitted_ledger
    data = read_window(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1))
    requests, world, policies, _ = data
    ceiling = search_ceiling(policies, world.get("pools", {}), "stable")
    top = replay_proposal(requests, policies, world, pools={"stable": ceiling}, need_of="stable")
    need = top["pool_need"]
    assert need is not None and 0 < need < ceiling
    at_need = replay_proposal(requests, policies, world, pools={"stable": need}, need_of="stable")
    assert at_need == top
    below = replay_proposal(requests, policies, world, pools={"stable": need - 1}, need_of="stable")
    assert below["pool_need"] is None and below["overall"]["deferrals_by_reason"]["cluster-capacity"] > 0
    shares = {n: replay_proposal(requests, policies, world, pools={"stable": n})["overall"]
              for n in range(0, ceiling + 1)}
    for limit in sorted({s["deferral_share"] for s in shares.values()})[:4] + [top["overall"]["deferral_share"]]:
        target = {"measure": "deferral_share", "limit": limit}
        found = smallest_pool(data, "stable", target)
        scan = [n for n in range(ceiling + 1) if meets(shares[n], target) and not (n and meets(shares[n - 1], target))]
        assert found["found"] in scan, (limit, found["found"], scan)
        assert found["tried"][found["found"]]["overall"] == shares[found["found"]]


def test_the_search_reuses_kept_calibrations_and_answers_the_same(pooled_submitted_ledger, tmp_path, monkeypatch):
    """With the file beside the ledger, a search keeps the calibrations it fits; a later search of the
    same window (another process would read the same file) fits none and answers the same, size for
    size, as a search without the file."""
    import lib.planning.replay.history as history
    from lib.ledger.replay import read_window
    from lib.planning.replay.search import smallest_pool
    db, first, last = pooled_submitted_ledger
    data = read_window(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1))
    target = {"measure": "deferral_share", "limit": 0.5}
    fits = []
    fit = history.calibrate_scopes
    monkeypatch.setattr(history, "calibrate_scopes", lambda *a, **k: fits.append(1) or fit(*a, **k))
    plain = smallest_pool(data, "stable", target)
    kept = tmp_path / "kept.json"
    cold = smallest_pool(data, "stable", target, kept=kept)
    assert fits and kept.exists()
    fits.clear()
    warm = smallest_pool(data, "stable", target, kept=kept)
    assert fits == []
    for other in (cold, warm):
        assert other["found"] == plain["found"] and other["tried"] == plain["tried"]


def test_sizes_at_or_above_a_never_short_passs_need_are_shown_without_a_replay(pooled_submitted_ledger):
    """The rows around the size found: a size at or above the most any request needed in a pass whose
    pool never ran short decides as that pass, so it is shown from it, replaying nothing."""
    from lib.dashboard.replay_view import pool_size_rows
    from lib.ledger.replay import read_window
    from lib.planning.replay.passes import replay_proposal
    from lib.planning.replay.search import PoolSizes, search_ceiling
    db, first, last = pooled_submitted_ledger
    data = read_window(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1))
    sizes = PoolSizes(data, "stable")
    ceiling = search_ceiling(data.policies, data.world.get("pools", {}), "stable")
    need = sizes.at(ceiling)["pool_need"]
    assert need is not None and need < ceiling and sizes.replays == 1
    rows = pool_size_rows(sizes, [need, need + 1, ceiling + 5])
    assert sizes.replays == 1 and set(rows["pool_gpus"]) == {need, need + 1, ceiling + 5}
    replayed = replay_proposal(data.requests, data.policies, data.world, pools={"stable": ceiling + 5},
                               need_of="stable")
    assert sizes.at(ceiling + 5)["overall"] == replayed["overall"]
    pool_size_rows(sizes, [need - 1])
    assert sizes.replays == 2 and sizes.at(need - 1)["pool_need"] is None


def test_a_smaller_pool_goes_on_from_a_never_short_pass_and_replays_the_same(pooled_submitted_ledger):
    """The search's later sizes start from the never-short pass's last mark before their first request
    that needs more of the pool than they have: every size, from the one that runs short at once to
    the need, gives exactly what a pass from the window's start gives."""
    from lib.ledger.replay import read_window
    from lib.planning.replay.passes import replay_proposal
    from lib.planning.replay.search import PoolSizes, search_ceiling
    db, first, last = pooled_submitted_ledger
    data = read_window(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1))
    requests, world, policies, _ = data
    sizes = PoolSizes(data, "stable")
    need = sizes.at(search_ceiling(policies, world.get("pools", {}), "stable"))["pool_need"]
    assert sizes.marks is not None and sizes.marks.marks and need
    started = {n: sizes.marks.start_for(n) for n in range(need)}
    assert any(m is not None and m.step > 0 for m in started.values())   # some size skips a stretch
    for n in range(need):
        fresh = replay_proposal(requests, policies, world, pools={"stable": n}, need_of="stable")
        assert sizes.at(n) == fresh, n


def test_the_sizes_beside_the_answer_are_steps_of_a_tenth_within_zero_and_the_ceiling():
    from lib.planning.replay.search import around
    assert around(363, 448) == [291, 327, 363, 399, 435]
    assert around(100, 100) == [80, 90, 100]       # nothing above the ceiling
    assert around(1, 448) == [0, 1, 2, 3]           # nothing below zero; a step is at least one


def test_a_size_known_within_a_step_stands_in_for_a_step_on_its_side():
    """The 1 M-run demo's search (N = 363 of at most 448; its never-short pass needed 404): every row
    beside the answer is a size the search already knows, so none costs a replay."""
    from lib.planning.replay.search import around
    tried = {448, 201, 302, 353, 378, 365, 359, 362, 363}
    assert around(363, 448, tried, 404) == [302, 353, 363, 404, 435]
    assert around(363, 448, {250}) == [291, 327, 363, 399, 435]        # more than a step away
    assert around(363, 448, {356}) == [291, 356, 363, 399, 435]        # below: stands in below only
    assert around(363, 448, {370}) == [291, 327, 363, 370, 435]        # above: above only
    assert around(5, 18, {4, 5, 6, 18}, 12) == [3, 4, 5, 6, 7]         # a known step keeps its own size


def test_the_search_shows_sizes_beside_its_answer_replaying_only_those_not_known(pooled_submitted_ledger):
    """pool_rows replays a size shown beside the answer only when the search did not know it, and each
    one shown lies within a step of a step of about a tenth, on its side."""
    from lib.dashboard.replay_view import pool_size_rows
    from lib.ledger.replay import read_window
    from lib.planning.replay.passes import replay_proposal
    from lib.planning.replay.search import around, search_ceiling, sizes_beside, smallest_pool
    db, first, last = pooled_submitted_ledger
    data = read_window(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1))
    ceiling = search_ceiling(data.policies, data.world.get("pools", {}), "stable")
    share = replay_proposal(data.requests, data.policies, data.world,
                            pools={"stable": ceiling})["overall"]["deferral_share"]
    found = smallest_pool(data, "stable", {"measure": "deferral_share", "limit": share})
    n, sizes = found["found"], found["sizes"]
    assert n is not None and n > 0
    shown = sizes_beside(found)

    def unknown(ns):
        return [s for s in ns if s not in sizes.tried and sizes.same_as(s) is None]
    needed = unknown(shown)
    assert len(needed) < len(unknown(around(n, found["ceiling"])))   # fewer than the plain steps would replay
    before = sizes.replays
    rows = pool_size_rows(sizes, shown)
    assert sizes.replays - before == len(needed)
    assert sorted(set(rows["pool_gpus"])) == shown and n in shown
    step = max(1, n // 10)
    for s in shown:
        assert any(abs(s - (n + k * step)) <= step and (s < n) == (k < 0) for k in (-2, -1, 0, 1, 2)), s
