"""A replay pauses CPython's cyclic garbage collector (lib.planning.replay.collector): the collector is off
while the window is read and its passes run, on again after (also after a failure, and after
overlapping replays in other threads), and a replay leaves next to no cyclic garbage behind, which
is what makes the pause safe. Ledgers are made by real `submit` and `finish` calls."""
from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from lib.ledger.replay import read_window, replay_ledger, replay_read
from lib.planning.replay.collector import collector_paused
from lib.planning.replay.passes import replay_proposal

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_off_inside_and_on_again_after_nesting_and_failure(collector_on):
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()   # the outer block still runs
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with collector_paused():
            raise ValueError("a failing replay")
    assert gc.isenabled()


def test_a_collector_its_owner_had_turned_off_stays_off(collector_on):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_resume_the_collector_when_the_last_ends(collector_on):
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with collector_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with collector_paused():
            second_in.set()
            first_out.wait(10)
            seen["while the second runs"] = gc.isenabled()
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"while the second runs": False}
    assert gc.isenabled()


def test_a_replay_runs_with_the_collector_off(pooled_submitted_ledger, collector_on):
    db, first, last = pooled_submitted_ledger
    states = set()

    def progress(fraction, message):
        states.add(gc.isenabled())
    result = replay_ledger(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1),
                           pools={"stable": 8}, progress=progress)
    assert states == {False} and gc.isenabled()
    assert result["requests"] >= 100


LEFT_BEHIND = """
import gc, json, sys
from datetime import datetime
from lib.ledger.replay import replay_ledger
from lib.planning.replay.collector import collector_paused
start, end = datetime.fromisoformat(sys.argv[2]), datetime.fromisoformat(sys.argv[3])
replay_ledger(sys.argv[1], start=start, end=end)   # the imports and first-use caches made
gc.collect()
with collector_paused():   # still paused when the replay returns: its cycles are all still there to count
    result = replay_ledger(sys.argv[1], start=start, end=end, pools={"stable": 8}, keep=True)
    unreachable = gc.collect()
print(json.dumps({"requests": result["requests"], "unreachable": unreachable}))
"""


def test_a_replay_leaves_next_to_no_cyclic_garbage(pooled_submitted_ledger, tmp_path):
    """In a process of its own (in the test process, other tests' threads allocate meanwhile): what
    the collector would have freed had it run during the replay."""
    db, first, last = pooled_submitted_ledger
    copy = tmp_path / "replay.duckdb"
    shutil.copyfile(db, copy)
    p = subprocess.run([sys.executable, "-c", LEFT_BEHIND, str(copy), (first - timedelta(hours=1)).isoformat(),
                        (last + timedelta(hours=1)).isoformat()], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["requests"] >= 100
    # a few dozen objects made once (the kept file's write), not one per request and pass: a cycle
    # made per request would count some 360 here (three passes of 120 requests)
    assert out["unreachable"] < out["requests"], out


def test_the_window_read_and_a_search_pass_pause_it_too(pooled_submitted_ledger, collector_on, monkeypatch):
    import lib.ledger.replay as ledger_replay
    db, first, last = pooled_submitted_ledger
    seen = []
    real = ledger_replay.read_world

    def read_world(*args, **kw):
        seen.append(("read", gc.isenabled()))
        return real(*args, **kw)
    monkeypatch.setattr(ledger_replay, "read_world", read_world)
    data = read_window(db, start=first - timedelta(hours=1), end=last + timedelta(hours=1))

    def progress(fraction, message):
        seen.append(("pass", gc.isenabled()))
    replay_proposal(data.requests, data.policies, data.world, pools={"stable": 8}, progress=progress)
    assert seen and {enabled for _, enabled in seen} == {False}
    assert {what for what, _ in seen} == {"read", "pass"}
    assert gc.isenabled()
    # and a replay of a window already read
    assert replay_read(data, pools={"stable": 8})["requests"] == len(data.requests)
    assert gc.isenabled()
