"""data/access.toml: who is a planner, a team member, a viewer or nobody — precedence, groups, unknown
people, the command line's team check — and a malformed file refused with the line and the reason."""
from __future__ import annotations

import pytest

from lib.gate.access import (AccessFileError, everyone, load_access_file, may, parse_access, resolve,
                             teams_for)

FILE = """
[access]
unknown = "viewer"

[planners]
emails = ["Ana@Example.org"]
groups = ["capacity-planners"]

[viewers]
emails = ["auditor@example.org"]

[teams.vision]
emails = ["vic@example.org"]
users = ["vic"]
groups = ["team-vision"]

[teams.speech]
emails = ["vic@example.org"]
groups = ["team-speech"]
"""


@pytest.fixture
def access():
    return parse_access(FILE)


def test_the_shipped_access_file_is_valid_and_names_a_planner_and_a_member():
    access = load_access_file()
    assert resolve(access, email="planner@example.org")["role"] == "planner"
    assert resolve(access, email="member@example.org")["teams"] == ("vision",)
    assert access["check_command_line"] is False     # a fresh clone's command line is not restricted


def test_e_mails_match_in_any_case_and_a_planner_beats_membership(access):
    assert resolve(access, email="ana@example.ORG")["role"] == "planner"
    both = resolve(access, email="someone@example.org", groups=["capacity-planners", "team-vision"])
    assert both["role"] == "planner" and both["teams"] == ("vision",) and both["sees"] is None


def test_a_member_is_matched_by_e_mail_user_or_group_and_gets_every_team_named(access):
    assert resolve(access, email="vic@example.org")["teams"] == ("speech", "vision")
    assert resolve(access, user="vic")["teams"] == ("vision",)
    by_group = resolve(access, email="new@example.org", groups=["team-speech"])
    assert by_group["role"] == "member" and by_group["teams"] == ("speech",)


def test_members_see_every_team_unless_the_file_says_own_teams(access):
    assert resolve(access, email="vic@example.org")["sees"] is None
    own = parse_access(FILE.replace('unknown = "viewer"', 'unknown = "viewer"\nmembers_see = "own-teams"'))
    assert resolve(own, email="vic@example.org")["sees"] == ("speech", "vision")


def test_unknown_people_are_viewers_or_nobody_as_the_file_says(access):
    assert resolve(access, email="stranger@example.org")["role"] == "viewer"
    closed = parse_access(FILE.replace('unknown = "viewer"', 'unknown = "none"'))
    nobody = resolve(closed, email="stranger@example.org", groups=["other"])
    assert nobody["role"] is None and nobody["sees"] == ()
    assert resolve(closed, email="auditor@example.org")["role"] == "viewer"   # named viewers still enter


def test_what_each_role_may_do(access):
    planner, member = resolve(access, email="ana@example.org"), resolve(access, email="vic@example.org")
    viewer = resolve(access, email="stranger@example.org")
    assert may(planner, "import") and may(planner, "policy") and may(planner, "what-if", "ads")
    assert not may(member, "import") and not may(member, "policy")
    assert may(member, "what-if", "vision") and not may(member, "what-if", "ads")
    assert not any(may(viewer, a, "vision") for a in ("import", "policy", "what-if", "submit"))
    assert may(everyone("local"), "import") and may(everyone("local"), "policy")
    with pytest.raises(ValueError, match="unknown action"):
        may(planner, "delete")


def test_the_command_line_check_gives_the_os_user_the_teams_of_their_name_and_unix_groups(access):
    assert teams_for(access, "vic", []) == ("vision",)
    assert teams_for(access, "bob", ["team-speech", "wheel"]) == ("speech",)
    assert teams_for(access, "bob", []) == ()
    assert teams_for(access, "ana", ["capacity-planners"]) == ()   # planning is not submitting


@pytest.mark.parametrize("text, line, reason", [
    ("[access]\nunknown = \"maybe\"\n", 2, 'unknown must be "viewer" or "none"'),
    ("[access]\nunknown = \"viewer\"\n\n[planners]\nemails = \"ana@example.org\"\n", 5,
     "emails must be a list of non-empty strings"),
    ("[planners]\nemails = [\"not-an-address\"]\n", 2, "'not-an-address' is not an e-mail address"),
    ("[teams.vision]\nmembers = [\"x\"]\n", 2, "members is not a known key"),
    ("[access]\nunknown = \"viewer\"\n[admins]\nemails = []\n", 3, "[admins] is not a known table"),
    ("[access]\ncheck_command_line = \"yes\"\n", 2, "check_command_line must be true or false"),
    ("[teams.\"Bad Team\"]\ngroups = [\"x\"]\n", 1, "the team name must be a team name"),
    ("[access]\nunknown = \"viewer\n", 2, "not valid TOML"),
])
def test_a_malformed_file_is_refused_with_its_line_and_reason(text, line, reason):
    with pytest.raises(AccessFileError) as info:
        parse_access(text, "access.toml")
    assert len(info.value.problems) == 1, info.value.problems
    assert info.value.problems[0].startswith(f"line {line}"), info.value.problems
    assert reason in info.value.problems[0]
    assert "access.toml" in str(info.value)


def test_every_problem_is_listed_at_once():
    with pytest.raises(AccessFileError) as info:
        parse_access('[access]\nunknown = "maybe"\nmembers_see = "some"\n[planners]\nusers = [1]\n')
    assert [p.split(":")[0] for p in info.value.problems] == ["line 2", "line 3", "line 5"]


def test_a_missing_file_is_an_access_file_error(tmp_path):
    with pytest.raises(AccessFileError, match="does not exist"):
        load_access_file(tmp_path / "nope.toml")


def test_an_access_file_nested_thousands_deep_is_an_access_file_error():
    with pytest.raises(AccessFileError, match="nested too deeply"):
        parse_access("[access]\nx = " + "[" * 3000 + "]" * 3000 + "\n")
