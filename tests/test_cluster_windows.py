"""The cluster's windows in the ledger and in the warm gate server: a sync replaces the whole set in
one audited write (and writes nothing when the set is the same), only windows not yet ended are
read, a window that cannot be stored is refused naming it, and the gate server keeps the last known
windows while Slurm does not answer, saying so once. Real ledgers in tmp dirs; for the server,
stand-ins for scontrol and sinfo on PATH print what the test cluster printed (tests/test_slurm_windows.py
does the same against the real cluster)."""
from __future__ import annotations

import os
import shutil
import threading
import time
from datetime import datetime, timedelta

import pytest

from lib.gate.terms import InputError, utcnow
from lib.ledger.cluster_windows import read_windows, replace_windows
from lib.ledger.connection import open_ledger
from lib.slurm.live import LiveGate
from tests.fixtures_ledger import query, run_cli, tiny_request
from tests.fixtures_slurm_output import NO_RESERVATIONS, SINFO

T0 = datetime(2027, 3, 1, 8, 0)


def window(name="maint", start=T0, hours=2.0, gpus=8, pool=None, accounts=(), users=("root",)) -> dict:
    return {"name": name, "start": start, "end": start + timedelta(hours=hours), "gpus": gpus, "pool": pool,
            "accounts": list(accounts), "users": list(users)}


def replace(db, windows, **kw) -> bool:
    with open_ledger(db) as con:
        return replace_windows(con, windows, source="scontrol", **kw)


def read(db, now) -> list[dict]:
    with open_ledger(db, read_only=True) as con:
        return read_windows(con, now)


def audit(db) -> list[tuple]:
    return query(db, "SELECT origin, action, rows_inserted, rows_updated, rows_unchanged, detail FROM audit "
                     "WHERE action = 'cluster-windows' ORDER BY audit_id")


def test_a_sync_replaces_the_whole_set_and_reads_give_the_windows_not_yet_ended(tiny_ledger):
    first = [window("maint"), window("other", start=T0 + timedelta(days=1), gpus=4, pool="stable",
                                     accounts=["search"])]
    assert replace(tiny_ledger, first) is True
    assert read(tiny_ledger, T0 - timedelta(days=1)) == first
    assert read(tiny_ledger, T0 + timedelta(hours=1)) == first            # maint is under way: still there
    assert read(tiny_ledger, T0 + timedelta(hours=2)) == first[1:]         # ended at that very time
    second = [window("maint", hours=3), window("new", start=T0 + timedelta(days=2), pool="preemptible")]
    assert replace(tiny_ledger, second) is True
    assert read(tiny_ledger, T0) == second                                # "other" is gone
    assert [a[:5] for a in audit(tiny_ledger)] == [("cli", "cluster-windows", 2, 0, 0),
                                                   ("cli", "cluster-windows", 1, 1, 0)]
    assert audit(tiny_ledger)[-1][5] == "2 window(s) from scontrol; 1 gone"


def test_the_same_set_again_writes_nothing_and_an_empty_set_clears(tiny_ledger):
    replace(tiny_ledger, [window()])
    before = query(tiny_ledger, "SELECT updated_at FROM cluster_windows")
    assert replace(tiny_ledger, [window()]) is False
    assert query(tiny_ledger, "SELECT updated_at FROM cluster_windows") == before and len(audit(tiny_ledger)) == 1
    assert replace(tiny_ledger, []) is True
    assert read(tiny_ledger, T0 - timedelta(days=1)) == [] and len(audit(tiny_ledger)) == 2


def test_a_source_replaces_only_its_own_windows(tiny_ledger):
    replace(tiny_ledger, [window("maint")])
    with open_ledger(tiny_ledger) as con:
        assert replace_windows(con, [window("planned", start=T0 + timedelta(days=3))], source="calendar") is True
    assert replace(tiny_ledger, [window("maint", hours=4)]) is True
    assert [(w["name"], w["end"] - w["start"]) for w in read(tiny_ledger, T0)] == [
        ("maint", timedelta(hours=4)), ("planned", timedelta(hours=2))]


@pytest.mark.parametrize("bad, said", [
    ({"end": T0}, "is not after start"),
    ({"start": T0.astimezone()}, "start: must be a naive UTC datetime"),
    ({"gpus": -1}, "gpus: must be a whole number"),
    ({"gpus": 2.5}, "gpus: must be a whole number"),
    ({"gpus": True}, "gpus: must be a whole number"),
    ({"pool": "gpu"}, "pool: must be one of stable, preemptible or None"),
    ({"name": ""}, "name: must be a non-empty string"),
    ({"users": "root"}, "users: must be a list of names"),
])
def test_a_window_that_cannot_be_stored_is_refused_by_name_and_field_and_nothing_changes(tiny_ledger, bad, said):
    replace(tiny_ledger, [window("kept")])
    wrong = {**window("wrong", start=T0 + timedelta(days=1)), **bad}
    with pytest.raises(InputError, match=f"cluster window #2 .*{said}.*nothing written"):
        replace(tiny_ledger, [window("new"), wrong])
    assert [w["name"] for w in read(tiny_ledger, T0 - timedelta(days=1))] == ["kept"]


def test_a_version_5_ledger_gains_the_windows_table_on_its_next_write(tiny_ledger):
    with open_ledger(tiny_ledger) as con:
        con.execute("DROP TABLE cluster_windows")
        con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    p = run_cli("teams", "--file", tiny_ledger.with_name("tiny.toml"), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert replace(tiny_ledger, [window()]) is True and read(tiny_ledger, T0) == [window()]


# ------------------------------------------------------------------------------ the gate server's copy


def slurm_line(name: str, start: datetime, minutes: int, extra: str = "Flags=MAINT,SPEC_NODES,ALL_NODES") -> str:
    """One reservation as the test cluster's scontrol prints it (--oneliner, UTC)."""
    return (f"ReservationName={name} StartTime={start:%Y-%m-%dT%H:%M:%S} "
            f"EndTime={start + timedelta(minutes=minutes):%Y-%m-%dT%H:%M:%S} Duration=01:00:00 Nodes=localhost "
            f"NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) {extra} TRES=cpu=2 Users=root "
            "Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a\n")


class StandIns:
    """scontrol and sinfo stand-ins in a folder put first on PATH: they print `reservations` and the
    test cluster's sinfo, or fail, or hang, as the test says."""

    def __init__(self, tmp_path, monkeypatch):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.out = tmp_path / "scontrol.out"
        self.sleep = shutil.which("sleep")
        (tmp_path / "sinfo.out").write_text(SINFO)
        self._script("sinfo", f"cat {tmp_path / 'sinfo.out'}")
        monkeypatch.setenv("PATH", f"{self.bin}:/usr/bin:/bin")

    def _script(self, name: str, body: str) -> None:
        exe = self.bin / name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(0o755)

    def prints(self, text: str) -> None:
        self.out.write_text(text)
        self._script("scontrol", f"cat {self.out}")

    def fails(self) -> None:
        self._script("scontrol", "echo 'slurm_load_reservations error: Unable to contact slurm controller' >&2; exit 1")

    def hangs(self, seconds: float) -> None:
        self._script("scontrol", f"exec {self.sleep} {seconds}")


@pytest.fixture
def slurm(tmp_path, monkeypatch) -> StandIns:
    return StandIns(tmp_path, monkeypatch)


def wait_for(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return got


def test_the_gate_server_reads_the_windows_at_start_writes_them_and_keeps_them_while_slurm_fails(
        tiny_ledger, slurm, capfd):
    start = utcnow().replace(microsecond=0) + timedelta(hours=1)
    slurm.prints(slurm_line("maint1", start, 60))
    live = LiveGate(tiny_ledger, flusher=False, windows_interval_s=3600)
    try:
        wait_for(lambda: live.window_watch.read_at)                 # the read at start
        expected = [{"name": "maint1", "start": start, "end": start + timedelta(hours=1), "gpus": 8,
                     "pool": None, "accounts": [], "users": ["root"]}]
        assert live.capacity_windows(utcnow()) == expected
        wait_for(lambda: live.ledger_windows)
        assert read(tiny_ledger, utcnow()) == expected
        assert [a[:2] for a in audit(tiny_ledger)] == [("slurm", "cluster-windows")]

        slurm.fails()
        assert [live.sync_windows() for _ in range(3)] == [False, False, False]
        assert live.capacity_windows(utcnow()) == expected          # the last known ones stay
        slurm.prints(NO_RESERVATIONS)
        assert live.sync_windows() is True
        assert live.capacity_windows(utcnow()) == [] and read(tiny_ledger, utcnow()) == []
        assert live.sync_windows() is False                        # nothing changed: nothing written
        assert len(audit(tiny_ledger)) == 2
    finally:
        live.close()
    err = capfd.readouterr().err
    assert err.count("cannot read the cluster's reservations") == 1, err   # once, not per try
    assert "exited 1: slurm_load_reservations error" in err
    assert err.count("recovered: the cluster's reservations read again (0 window(s))") == 1


def test_without_slurm_the_gate_server_decides_with_the_ledgers_windows_and_says_so_once(tiny_ledger, slurm, capfd):
    start = utcnow().replace(microsecond=0) + timedelta(hours=3)
    replace(tiny_ledger, [window("from-cli", start=start)])
    slurm.fails()
    live = LiveGate(tiny_ledger, flusher=False, windows_interval_s=0.05)
    try:
        time.sleep(0.5)                                            # about ten tries
        assert [w["name"] for w in live.capacity_windows(utcnow())] == ["from-cli"]
        decision, _ = live.decide(tiny_request(1), now=utcnow(), origin="cli", write=False)
        assert decision["state"] == "admit"
    finally:
        live.close()
    err = capfd.readouterr().err
    assert err.count("cannot read the cluster's reservations") == 1, err


def test_a_slow_scontrol_never_holds_up_a_decision(tiny_ledger, slurm):
    slurm.prints(NO_RESERVATIONS)
    live = LiveGate(tiny_ledger, flusher=False, windows_interval_s=3600)
    try:
        wait_for(lambda: live.window_watch.read_at)
        slurm.hangs(3)
        syncing = threading.Thread(target=live.sync_windows)
        syncing.start()
        time.sleep(0.2)                                            # scontrol is running now
        t0 = time.monotonic()
        decision, _ = live.decide(tiny_request(2), now=utcnow(), origin="cli", write=False)
        took = time.monotonic() - t0
        assert decision["state"] == "admit" and syncing.is_alive() and took < 1.5, took
        syncing.join(timeout=20)
    finally:
        live.close()


def test_closing_the_gate_server_ends_a_scontrol_under_way(tiny_ledger, slurm):
    slurm.hangs(29.777)                                            # a controller that is down
    live = LiveGate(tiny_ledger, flusher=False, windows_interval_s=3600)
    time.sleep(0.5)                                                # the read at start waits on it
    assert running("29.777")
    t0 = time.monotonic()
    live.close()
    assert time.monotonic() - t0 < 3
    wait_for(lambda: not running("29.777"), timeout_s=5)


def running(marker: str) -> bool:
    """Whether a process of this machine has `marker` in its command line."""
    for proc in os.listdir("/proc"):
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except (OSError, ValueError):
            continue
    return False
