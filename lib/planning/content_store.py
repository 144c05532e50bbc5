"""Results kept on disk between processes, by content: each entry's key is a hash of everything the
result depends on (its inputs and the code that made it), so an entry is never stale and nothing
needs to invalidate it; a changed input finds no entry and is computed again.

One JSON file per store (no pickle: reading it runs no code) holds the `max_entries` entries used
last, written whole to a temporary file and renamed over the old one: a reader sees the old file or
the new one; of two writers the last wins, which loses entries, never correctness. A file that
cannot be read or written is no store: the caller computes as it would without one. Used for the
demand forecast's fitted models (lib.planning.forecast.cache) and the calibration's replayed bounds
(lib.dashboard.estimate_queries).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

_read: dict[tuple[Path, int], tuple[tuple, dict]] = {}   # per file and format: (its stat when read, its entries)


def _signature(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _same(value: Any) -> Any:
    return value


def load(path: Path, fmt: int, decode: Callable[[Any], Any] = _same) -> dict:
    """The entries of the store at `path` (oldest use first), each decoded; none if the file is
    missing, unreadable or of another format `fmt`. A file unchanged since it was last read here is
    not parsed again."""
    try:
        sig = _signature(path)
        if (seen := _read.get((path, fmt))) is not None and seen[0] == sig:
            return dict(seen[1])
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        entries = {str(k): decode(v) for k, v in raw["entries"].items()} if raw.get("format") == fmt else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    _read[(path, fmt)] = (sig, entries)
    return dict(entries)


def save(path: Path, entries: dict, fmt: int, max_entries: int, encode: Callable[[Any], Any] = _same) -> None:
    """Write the last `max_entries` of `entries` (oldest use first) to `path`; a failure is ignored."""
    keep = dict(list(entries.items())[-max_entries:])
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": fmt, "entries": {k: encode(v) for k, v in keep.items()}}, f)
        os.replace(tmp, path)
        _read[(path, fmt)] = (_signature(path), keep)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
