"""A proposal as a teams file (lib.ledger.teams_proposal): data/teams.toml with only the edited keys
written, everything else (comments, [defaults], order, integers) as the planners wrote it; and the
whole file written from the ledger when the file does not hold the ledger's policies."""
from __future__ import annotations

import difflib
import tomllib

import pytest

from lib.ledger.teams_file import DEFAULT_TEAMS_FILE, POLICY_FIELDS, TeamsFileError, parse_teams_file
from lib.ledger.teams_proposal import proposal_file, proposal_text, propose

CURRENT = DEFAULT_TEAMS_FILE.read_text(encoding="utf-8")
# vision: one key it has, one it inherits from [defaults]; safety (the last team, whose table ends
# before the snapshots' comment): a whole-number float, a key it inherits, and one it sets already
EDITS = {"vision": {"reserved_gpus": 100, "max_runtime_hours": 36.0},
         "safety": {"monthly_budget_gpu_hours": 2500.0, "max_gpu_mem_gb": 48.0, "retraining_reserved_gpus": 0}}
WRITTEN = {("vision", "reserved_gpus"), ("vision", "max_runtime_hours"), ("safety", "monthly_budget_gpu_hours"),
           ("safety", "max_gpu_mem_gb")}


def policies(text: str) -> dict[str, dict]:
    return {t["team"]: t for t in parse_teams_file(text)["teams"]}


def test_a_proposal_changes_only_the_edited_lines_of_the_teams_file():
    text = proposal_text(EDITS)
    old, new = CURRENT.splitlines(), text.splitlines()
    changed = [line[1:] for line in difflib.unified_diff(old, new, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed and all(line.split(" = ")[0] in {k for _, k in WRITTEN} for line in changed), changed
    assert sum(line.startswith("+") for line in difflib.ndiff(old, new)) == len(WRITTEN)
    # every comment and [defaults] survive, in their order
    assert [line for line in new if line.lstrip().startswith("#")] == [line for line in old if line.lstrip().startswith("#")]
    assert "[defaults]" in new and tomllib.loads(text)["defaults"] == tomllib.loads(CURRENT)["defaults"]
    # an inherited key lands in the team's own table, before the comment of what follows it
    assert new.index("max_gpu_mem_gb = 48") < new.index("# Data snapshots a request may name. `team` omitted: "
                                                       "usable by every team.")
    assert new.index("[teams.safety]") < new.index("max_gpu_mem_gb = 48")


def test_a_proposal_parses_to_the_same_policy_but_the_edits_and_integers_stay_integers():
    text = proposal_text(EDITS)
    before, after = policies(CURRENT), policies(text)
    assert set(before) == set(after)
    for team, policy in after.items():
        expected = {**before[team], **EDITS.get(team, {})}
        assert {k: policy[k] for k in POLICY_FIELDS} == {k: expected[k] for k in POLICY_FIELDS}
        assert (policy["policy_version"] != before[team]["policy_version"]) == (team in EDITS)
    old_doc, new_doc = tomllib.loads(CURRENT), tomllib.loads(text)
    for team, table in new_doc["teams"].items():
        for key, value in table.items():
            if isinstance(old_doc["teams"][team].get(key), int) or (team, key) in WRITTEN:
                assert type(value) is int, (team, key, value)
    assert {k: v for k, v in new_doc.items() if k != "teams"} == {k: v for k, v in old_doc.items() if k != "teams"}


def test_an_edit_of_a_team_the_file_lacks_or_out_of_range_is_refused_with_every_problem():
    with pytest.raises(TeamsFileError) as info:
        proposal_text({"nobody": {"reserved_gpus": 1}, "ghost": {}})
    assert len(info.value.problems) == 2 and "[teams.ghost]" in info.value.problems[0]
    with pytest.raises(TeamsFileError) as info:
        proposal_text({"vision": {"reserved_gpus": -1, "bogus": 2}})
    assert len(info.value.problems) == 2


def test_the_download_edits_the_file_when_it_holds_the_ledgers_policies():
    current = policies(CURRENT)
    proposed = propose(current, {"ranking": {"reserved_gpus": 40}})
    text, note = proposal_file(current, proposed)
    assert note is None
    assert [line for line in difflib.ndiff(CURRENT.splitlines(), text.splitlines()) if line[:1] in "+-"] == [
        "- reserved_gpus = 48", "+ reserved_gpus = 40"]


def test_the_download_is_written_from_the_ledger_when_the_file_differs(tmp_path):
    current = policies(CURRENT)
    stale = tmp_path / "teams.toml"
    stale.write_text(CURRENT.replace("reserved_gpus = 96", "reserved_gpus = 95"), encoding="utf-8")
    proposed = propose(current, {"ranking": {"reserved_gpus": 40}})
    text, note = proposal_file(current, proposed, path=stale)
    assert "differs for vision" in note and "written from the ledger" in note
    got = policies(text)
    assert got["ranking"]["reserved_gpus"] == 40 and got["vision"]["reserved_gpus"] == 96
    assert {t: p["policy_version"] for t, p in got.items()} == {p["team"]: p["policy_version"] for p in proposed}
    text, note = proposal_file(current, proposed, path=tmp_path / "missing.toml")
    assert "file not found" in note and policies(text)["ranking"]["reserved_gpus"] == 40
