"""The gate server's journal commits decisions that arrive together with one fsync (group commit):
each caller returns only once an fsync covered its entry, and concurrent callers share fsyncs."""
from __future__ import annotations

import os
import sqlite3
import threading
from datetime import datetime

from lib.slurm import journal as journal_module
from lib.slurm.journal import Journal


def test_concurrent_appends_share_fsyncs_and_each_returns_durable(tmp_path, monkeypatch):
    j = Journal(tmp_path / "g.gate-journal")
    synced_upto: list[int] = []
    real = os.fsync

    def counting_fsync(fd):
        # what an fsync now covers: every entry written so far (read from the WAL through a 2nd connection)
        with sqlite3.connect(j.path) as other:
            synced_upto.append(other.execute("SELECT max(seq) FROM entries").fetchone()[0])
        real(fd)
    monkeypatch.setattr(journal_module.os, "fsync", counting_fsync)
    returned: list[tuple[int, int]] = []   # (seq, fsyncs done when make_durable returned)

    def caller(k):
        for i in range(20):
            seq = j.append(decided_at=datetime(2026, 1, 1), origin="cli", request_json="{}", decision_json="{}",
                           state="admit", caller_uid=0, caller_pid=k, durable=False)
            j.make_durable(seq)
            returned.append((seq, len(synced_upto)))
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    j.close()
    assert len(returned) == 320
    assert 0 < len(synced_upto) < 320              # shared: fewer fsyncs than entries
    for seq, n in returned:                        # each returned after an fsync that covered it
        assert n > 0 and max(synced_upto[:n]) >= seq


def test_a_journal_synced_normal_never_fsyncs(tmp_path, monkeypatch):
    j = Journal(tmp_path / "g.gate-journal", sync="NORMAL")
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (_ for _ in ()).throw(AssertionError("fsync")))
    seq = j.append(decided_at=datetime(2026, 1, 1), origin="cli", request_json="{}", decision_json="{}",
                   state="defer", caller_uid=0, caller_pid=1, durable=False)
    j.make_durable(seq)
    j.close()
