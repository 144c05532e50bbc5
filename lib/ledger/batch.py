"""Decisions made elsewhere (the warm gate server's journal) moved into the ledger in batches.

Each journal entry is applied exactly once: the ledger's `meta` table keeps, per journal, the
highest entry number applied (key `gate-journal:<journal id>`), written in the same transaction as
the entries. A batch that was applied before (a server killed after the ledger commit, before it
noted that in its journal) is skipped entry by entry on the next try.
"""
from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from lib.gate.contracts import Decision, Request
from lib.ledger.connection import transaction
from lib.ledger.recording import record_decisions


class JournalEntry(TypedDict):
    seq: int                # the journal's entry number (increasing, never reused)
    decided_at: datetime    # naive UTC
    origin: str             # 'slurm', 'cli', ...
    request: Request
    decision: Decision
    record: bool            # False: the entry only advances the mark (a decision nobody got an answer for)
    actor: str | None       # who asked (decisions.actor)


def _key(journal_id: str) -> str:
    return f"gate-journal:{journal_id}"


def applied_through(con, journal_id: str) -> int:
    """The highest entry number of journal `journal_id` already in the ledger (0: none)."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", [_key(journal_id)]).fetchone()
    return int(row[0]) if row else 0


def apply_batch(con, journal_id: str, entries: list[JournalEntry]) -> int:
    """Record the entries newer than the journal's mark, in entry order, and move the mark to the
    last entry, all in one transaction. Returns how many decisions were recorded."""
    if not entries:
        return 0
    with transaction(con):
        done = applied_through(con, journal_id)
        fresh = [e for e in sorted(entries, key=lambda e: e["seq"]) if e["seq"] > done]
        if not fresh:
            return 0
        todo = [(e["request"], e["decision"], e["origin"], e["decided_at"], e.get("actor"))
                for e in fresh if e["record"]]
        record_decisions(con, todo)
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [_key(journal_id), str(fresh[-1]["seq"])])
    return len(todo)
