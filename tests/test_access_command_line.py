"""`python -m lib submit` on a login node: when the access file sets check_command_line, the OS user
submits only for the teams the file gives them (by user name or Unix group); any other team is refused
with exit 2 and nothing is written. A real ledger and a real `python -m lib` process."""
from __future__ import annotations

from lib.ledger.audit import os_user, unix_groups
from tests.fixtures_ledger import counts, run_cli, tiny_request, write_json

CHECKED = """
[access]
check_command_line = {check}

[teams.tiny]
{who}
"""


def submit(tmp_path, db, access_text: str, team: str = "tiny"):
    access = tmp_path / "access.toml"
    access.write_text(access_text, encoding="utf-8")
    request = write_json(tmp_path / "request.json", tiny_request(1, team=team))
    return run_cli("submit", request, db=db, env={"GATE_ACCESS": str(access)})


def test_the_os_user_named_for_a_team_submits_for_it(tiny_ledger, tmp_path):
    p = submit(tmp_path, tiny_ledger, CHECKED.format(check="true", who=f'users = ["{os_user()}"]'))
    assert p.returncode == 0, p.stderr
    assert counts(tiny_ledger)["decisions"] == 1


def test_a_unix_group_of_the_user_gives_its_teams(tiny_ledger, tmp_path):
    group = unix_groups(os_user())[0]
    p = submit(tmp_path, tiny_ledger, CHECKED.format(check="true", who=f'groups = ["{group}"]'))
    assert p.returncode == 0, p.stderr


def test_a_team_the_file_does_not_give_the_user_is_refused_and_nothing_is_written(tiny_ledger, tmp_path):
    before = counts(tiny_ledger)
    p = submit(tmp_path, tiny_ledger, CHECKED.format(check="true", who='users = ["someone-else"]'))
    assert p.returncode == 2
    assert f"user {os_user()} may not submit team 'tiny'" in p.stderr and "no team" in p.stderr
    assert counts(tiny_ledger) == before


def test_without_check_command_line_anyone_submits(tiny_ledger, tmp_path):
    p = submit(tmp_path, tiny_ledger, CHECKED.format(check="false", who='users = ["someone-else"]'))
    assert p.returncode == 0, p.stderr


def test_a_malformed_access_file_refuses_the_submit_with_its_line(tiny_ledger, tmp_path):
    before = counts(tiny_ledger)
    p = submit(tmp_path, tiny_ledger, '[access]\ncheck_command_line = "yes"\n')
    assert p.returncode == 2 and "line 2" in p.stderr
    assert counts(tiny_ledger) == before


def test_the_gate_servers_question_by_peer_uid_gets_the_same_answer(tmp_path):
    """What a server holding a caller's peer uid asks: the user name of the uid, their Unix groups, and
    teams_for over the access file."""
    import os

    from lib.gate.access import parse_access, teams_for
    access = parse_access(CHECKED.format(check="true", who=f'users = ["{os_user()}"]'))
    user = os_user(os.getuid())
    assert user == os_user() and teams_for(access, user, unix_groups(user)) == ("tiny",)
    assert os_user(2_000_000_000) == "2000000000"        # no passwd entry: the number, never a crash
