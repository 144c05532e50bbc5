"""The audit read model: who imported or exported what, and when (the ledger's `audit` table), newest
first — what the Upload page shows."""
from __future__ import annotations

import pandas as pd

from lib.dashboard.reading import read_frame, reader

RECENT_WRITES = 50      # rows the Upload page lists


def recent_writes(path, limit: int = RECENT_WRITES) -> pd.DataFrame:
    """The `limit` latest audited writes: written_at (UTC), who (identity), origin (app | cli), action
    (import | policy-export), file_name, format, runs_inserted / runs_updated / runs_unchanged (imports)."""
    with reader(path) as con:
        return read_frame(con, """
            SELECT written_at, actor AS who, origin, action, file_name, format,
                   rows_inserted AS runs_inserted, rows_updated AS runs_updated, rows_unchanged AS runs_unchanged
              FROM audit ORDER BY written_at DESC, audit_id DESC LIMIT $limit""", {"limit": int(limit)})
