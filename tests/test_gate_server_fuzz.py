"""A real gate server, its team at quota, fed hostile requests under accept-and-flag: every job gets a
decision or a reject (the hook's exit 1), never a gate failure that lets it through (4) nor an admit
(0), and the server goes on answering. Then the raw wire format: random bytes, NULs, invalid UTF-8,
odd field counts; the server survives and never answers 0 or 4. No Slurm needed: the hook's own
client (or a raw socket) talks to it."""
from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fixtures_hostile_requests import PATHS, STATED, key_tokens, placed_text, tokens
from tests.fixtures_ledger import run_cli
from tests.fixtures_slurm import GateServerProcess, quota_teams, raw_answer

pytestmark = pytest.mark.slow

FLAG = {"on_failure": "accept-and-flag"}
def fuzz(examples: int):
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def qa_job(run_id: str, comment: str, *, time_limit="600", name=None) -> dict:
    """What job_submit.lua sends for `sbatch --account=qa --gres=gpu:8 --time=... --comment=...`."""
    return {"account": "qa", "time_limit": time_limit, "name": name or run_id, "comment": comment,
            "user": "alice", "uid": "4242", "tres_per_node": "gres:gpu:8"}


def _comment(team_run_id: str, **changes) -> str:
    # 5 h on 8 GPUs (under the pilot threshold): each admitted job holds its GPUs for the whole test
    return json.dumps({**STATED, "run_id": team_run_id, "estimated_gpu_hours": 40, **changes})


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory):
    """A gate server on a ledger of QUOTA_TEAMS whose team qa holds its whole quota (16 of 16), for the
    module: the later tests check it still answers after the hostile input of the earlier ones."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.teams_file import sync_teams
    d = tmp_path_factory.mktemp("fuzz")
    (d / "teams.toml").write_text(quota_teams())
    db = d / "gate.duckdb"
    with open_ledger(db) as con:
        sync_teams(con, d / "teams.toml")
    saved = os.environ.get("GATE_DB")
    os.environ["GATE_DB"] = str(db)  # a message that names no ledger gets this one, never data/'s
    try:
        srv = GateServerProcess(db, d / "gate.sock")
    finally:
        os.environ.pop("GATE_DB") if saved is None else os.environ.__setitem__("GATE_DB", saved)
    try:
        filled = [srv.ask(qa_job(f"fill-{i}", _comment(f"fill-{i}")), **FLAG) for i in range(2)]
        assert [o.code for o in filled] == [0, 0], [o.lines() for o in filled]  # qa now holds 16 of 16 GPUs
        yield srv
    finally:
        srv.stop()


def _at_quota_and_alive(server, tag: str) -> None:
    assert server.proc.poll() is None, "the gate server died"
    deferred = server.ask(qa_job(f"ctl-{tag}", _comment(f"ctl-{tag}")), **FLAG)
    assert deferred.code == 1 and "[capacity]" in " ".join(deferred.lines()), deferred.lines()
    other = server.ask({**qa_job(f"qb-{tag}", _comment(f"qb-{tag}")), "account": "qb"}, **FLAG)
    assert other.code == 0, other.lines()


@fuzz(80)
@given(base=st.sampled_from([STATED, {**STATED, "max_runtime_hours": 10}]), path=st.sampled_from(PATHS),
       token=tokens, key=st.one_of(st.none(), key_tokens), time_set=st.booleans(), draw=st.data())
def test_hostile_comments_are_judged_never_let_through(quota_server, base, path, token, key, time_set, draw):
    if not time_set and "max_runtime_hours" not in base:
        base = {**base, "max_runtime_hours": 10}  # without --time the comment must say it (else incomplete)
    run_id = f"hostile-{draw.draw(st.integers(0, 10 ** 9))}"
    comment = placed_text({**base, "run_id": run_id}, path, token, key_token=key)
    out = quota_server.ask(qa_job(run_id, comment, time_limit="600" if time_set else None), **FLAG)
    text = " ".join(out.lines())
    assert out.code == 1, (out.code, text[:600])
    assert "training-gate: deferred" in text or "training-gate: rejected" in text, text[:600]


def test_hostile_comments_then_the_server_still_answers_correctly(quota_server):
    # after the property above (same module server), and after one of each kind again here
    for i, token in enumerate(["1" + "0" * 400, '"\\udcff"', "[" * 100_000 + "]" * 100_000, "NaN",
                               '"' + "x" * 1_000_000 + '"']):
        out = quota_server.ask(qa_job(f"again-{i}", placed_text({**STATED, "run_id": f"again-{i}"}, ("note",), token)),
                         **FLAG)
        assert out.code == 1, out.lines()
    no_run_id = json.dumps({k: v for k, v in STATED.items() if k != "run_id"})
    named = quota_server.ask(qa_job("x", no_run_id, name="job-\udcff"), **FLAG)
    assert named.code == 1 and "valid Unicode" in " ".join(named.lines())  # the job name as run ID
    _at_quota_and_alive(quota_server, "after-comments")


KEYS = [b"f:comment", b"f:account", b"f:name", b"f:tres_per_node", b"f:time_limit", b"f:uid", b"f:array",
        b"f:nonsense", b"c:op", b"c:request", b"c:origin", b"c:timeout_s", b"c:on_failure", b"c:", b"", b"\xff"]
WORDS = [b"check", b"submit", b"qa", b"gres:gpu:8", b"600", b"1e999", b"-1", b"accept", b"\xff\xfe\xfd",
         b"\xed\xa0\x80", b"\xc0\x80", b'{"run_id": "\xed\xa0\x80", "kind": "exploratory"}', b"[" * 5000,
         b'{"gpus": ' + b"9" * 5000 + b"}", b"NaN", b"@/etc/shadow"]
wire = st.one_of(
    st.binary(max_size=3000),
    st.lists(st.one_of(st.sampled_from(KEYS), st.sampled_from(WORDS), st.binary(max_size=64)),
             max_size=14).map(b"\0".join),
)


@fuzz(50)
@given(payload=wire)
def test_the_raw_wire_format_never_gets_an_admit_or_a_flagged_pass(quota_server, payload):
    answer = raw_answer(quota_server.sock, payload)
    head, _, rest = answer.partition("\n")
    assert head.isdigit(), answer[:300]
    assert int(head) != 4, answer[:600]
    if int(head) == 0:  # only an op request (c:op) is answered 0: with its decision, never an admit
        assert json.loads(rest)["state"] != "admit", answer[:600]


# invalid UTF-8 (no NUL, quote, backslash or control character: the comment stays one JSON string)
_plain_bytes = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\'),
                       max_size=10).map(str.encode)
bad_bytes = st.builds(lambda pre, high, post: pre + high + post, _plain_bytes,
                      st.lists(st.integers(0x80, 0xFF), min_size=1, max_size=6).map(bytes),
                      _plain_bytes).filter(lambda b: not _utf8(b))


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@fuzz(20)
@given(raw=bad_bytes, where=st.sampled_from(["note", "run_id", "data_snapshot", "kind"]))
def test_bytes_that_are_not_utf8_inside_a_comment_string_are_a_reject(quota_server, raw, where):
    comment = json.dumps({**STATED, "run_id": "bytes-1", where: "@@"}).encode().replace(b"@@", raw, 1)
    parts = [b"f:account", b"qa", b"f:tres_per_node", b"gres:gpu:8", b"f:time_limit", b"600", b"f:name", b"bytes-1",
             b"f:comment", comment, b"c:db", str(quota_server.db).encode(), b"c:on_failure", b"accept-and-flag"]
    answer = raw_answer(quota_server.sock, b"\0".join(parts))
    assert answer.startswith("1\nMSG training-gate: rejected"), answer[:600]
    assert f"[invalid-request] {where} must be" in answer, answer[:600]  # valid Unicode text, or one of the kinds


def test_after_the_raw_fuzz_the_server_still_answers_correctly(quota_server):
    _at_quota_and_alive(quota_server, "after-wire")


def test_the_command_line_through_the_server_exits_2_for_hostile_values(quota_server, tmp_path):
    base = {**STATED, "team": "qa", "gpus": 8, "max_runtime_hours": 10, "capacity": "stable"}
    env = {"TG_GATE_SOCKET": quota_server.sock}
    for command, text, words in [
        ("check", placed_text(base, ("run_id",), '"r-\\ud800"'), "valid Unicode"),
        ("submit", placed_text(base, ("budget_gpu_hours",), "1" + "0" * 400), "too large"),
        ("submit", placed_text(base, ("pilot",), "[" * 100 + "]" * 100), "nested"),
    ]:
        p = run_cli(command, "-", db=quota_server.db, stdin=text, env=env)
        assert p.returncode == 2, (command, p.returncode, p.stderr[-600:])
        assert words in p.stdout + p.stderr and "gate failure" not in p.stderr, p.stderr[-600:]
    _at_quota_and_alive(quota_server, "after-cli")


def test_every_hostile_decision_reaches_the_ledger_as_standard_json(quota_server):
    """Last in this module: what every test above journaled (and one more here) moves into the ledger."""
    from lib.ledger.connection import open_ledger
    comment = placed_text({**STATED, "run_id": "last-\udcff"}, ("k\ud800",), "NaN")
    assert quota_server.ask(qa_job("last", comment), **FLAG).code == 1
    quota_server.flush()  # the journal into the ledger now: no entry may stop the flusher
    with open_ledger(quota_server.db, read_only=True) as con:
        rows = con.execute("SELECT run_id, state, request_json, decision_json FROM decisions").fetchall()
    assert "'last-\\udcff'" in {run_id for run_id, state, _, _ in rows if state == "reject"}
    assert {run_id.split("-")[0] for run_id, state, _, _ in rows if state == "admit"} <= {"fill", "qb"}

    def refuse(name):
        raise AssertionError(f"{name} in the ledger's JSON")
    for _, _, request_json, decision_json in rows:
        json.loads(request_json, parse_constant=refuse)
        json.loads(decision_json, parse_constant=refuse)
    assert "Traceback" not in quota_server.stop()
