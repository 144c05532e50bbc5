"""CPython's cyclic garbage collector paused during bulk work that makes no reference cycles.

A policy replay keeps millions of objects alive (the window's parsed requests, each pass's
outcomes, the holdings) and allocates more with every request it decides. The cyclic collector
then runs a full collection now and again, each traversing every live container, and finds next to
nothing to free: a replay's objects are freed by reference counting, which the pause leaves alone.
On the 10⁶-run demo's 4-week window those full collections took about 4 of a changed-pool replay's
17 seconds (bench/bench_replay.py), and a test holds that a replay leaves next to no cyclic garbage.

The pause is process-wide (`gc.disable`). Nested or concurrent users (a Streamlit server's sessions
are threads) share one count: the collector resumes when the last one leaves, and only if it was
running when the first one came.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_pause = {"users": 0, "resume": False}


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (or, as a decorator, for each call)."""
    with _lock:
        if _pause["users"] == 0:
            _pause["resume"] = gc.isenabled()
            gc.disable()
        _pause["users"] += 1
    try:
        yield
    finally:
        with _lock:
            _pause["users"] -= 1
            if _pause["users"] == 0 and _pause["resume"]:
                gc.enable()
