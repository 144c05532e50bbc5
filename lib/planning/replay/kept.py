"""What a policy replay (lib.planning.replay.passes) keeps between processes, by content, in a file beside
the ledger (lib.planning.content_store): the passes that do not depend on the proposal (the
baseline, the ledger's own policies and pools replayed; the recorded decisions taken as they were)
and the calibrations fitted over the window, and which of its requests are valid. A replay of a
window replayed before (another pool, another proposal) then runs only the proposal's pass, fits only
the calibrations its own admits changed, and validates no request again.

Each entry's key is a sha256 of everything it depends on: the window's requests and replay world
(`window_digest`), the pass's policies, calibration levels and pools, the calibration refresh and
window, and the engine's code (`engine_code`: the gate's and the replay's source, and Python's
version). A changed input finds no entry; nothing is ever invalidated. A kept pass is read back
exactly as it was made (JSON keeps floats to the bit, and the order of every list and mapping).
"""
from __future__ import annotations

import hashlib
import io
import json
import pickle
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

from lib.planning import content_store

KEPT_SUFFIX = ".replay-passes.json"   # beside the ledger
KEPT_FORMAT = 1
KEPT_ENTRIES = 12                     # a window's baseline, recorded pass and fits: about 3 MB per 50,000 requests


@lru_cache(maxsize=1)
def engine_code() -> bytes:
    """What every kept result depends on besides its inputs: the source of the gate (lib/gate, which
    decides and calibrates), of the replay (lib/planning/replay/*.py, lib/planning/holdings.py), and Python's
    version (the row hashes of lib.planning.replay.history's fingerprints are Python's own)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256(f"{sys.version}\0format {KEPT_FORMAT}\0".encode())
    for path in [*sorted((here.parent.parent / "gate").glob("*.py")), *sorted(here.glob("*.py")),
                 here.parent / "holdings.py"]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.digest()


_digests: list = [None, None, b""]   # the last window digested: (requests, world, digest)


def window_digest(requests: list, world: dict) -> bytes:
    """sha256 of a window's recorded requests (in order) and its replay world, mappings in key order
    and sets sorted. A window replayed under several proposals in one process is digested once."""
    if _digests[0] is requests and _digests[1] is world:
        return _digests[2]
    canonical = {k: (sorted(v.items()) if isinstance(v, dict) else v) for k, v in sorted(world.items())
                 if k != "snapshots"}
    snaps = sorted((str(team), sorted(names)) for team, names in world.get("snapshots", {}).items())
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.fast = True   # no memo: equal values give equal bytes, however the reader shared objects
    pickler.dump((requests, canonical, snaps))
    digest = hashlib.sha256(out.getbuffer()).digest()
    _digests[:] = [requests, world, digest]
    return digest


def _tally_out(t: dict) -> dict:
    return {**t, "deferrals_by_reason": dict(t["deferrals_by_reason"])}


def _tally_in(t: dict) -> dict:
    return {**t, "deferrals_by_reason": Counter(t["deferrals_by_reason"])}


class KeptPasses:
    """The kept passes and calibrations of one window (`requests`, `world`) in the file `path`.
    `get`/`put` a pass by `key`; `fit`/`fitted` calibrations; `valid`/`is_valid` the requests that
    validate; `save` writes what is new."""

    def __init__(self, path: Path, requests: list, world: dict):
        self.path, self.requests = Path(path), requests
        self.window = engine_code() + window_digest(requests, world)
        self.entries = content_store.load(self.path, KEPT_FORMAT)
        self.changed = False
        self.fits_key = self._digest(("fits",))
        self.fits: dict = dict(self.entries.get(self.fits_key) or {})   # its own: the store's copy stays as read
        self.new_fits = False
        self.valid_key = self._digest(("valid requests",))
        self.known_valid = set(self.entries.get(self.valid_key) or ())
        self.new_valid: list[int] = []

    def _digest(self, parts) -> str:
        text = json.dumps(parts, sort_keys=True, default=repr)
        return hashlib.sha256(self.window + text.encode()).hexdigest()

    def key(self, mode: str, policies: dict, levels: dict, pools: dict, refresh: str, max_runs: int,
            window_days: int, skip=()) -> str:
        """The key of a pass (`mode`) under these policies, levels (as used: team -> level), pools and
        calibration settings, leaving out the decision IDs `skip`."""
        return self._digest((mode, policies, levels, pools, refresh, max_runs, window_days, sorted(skip)))

    def get(self, key: str) -> dict | None:
        """The pass kept under `key` as `_run` returned it (None when none is): outcomes by request
        position (each its request, state, reason codes or why it was excluded, reserved GPU-hours),
        per-team tallies and the calibrations it computed."""
        kept = self.entries.get(key)
        if kept is None:
            return None
        outcomes = kept["outcomes"]
        return {"outcomes": [(req, o[0], o[1], o[2]) for req, o in zip(self.requests, outcomes)]
                if outcomes is not None else [],
                "tallies": {t: _tally_in(v) for t, v in kept["tallies"].items()},
                "calibrations_computed": kept["calibrations_computed"]}

    def put(self, key: str, done: dict, *, outcomes: bool = True) -> None:
        """Keep a pass under `key` (its outcomes only when `outcomes`: the recorded pass's are not read)."""
        self.entries.pop(key, None)   # the most recently made last: the store keeps the last ones
        self.entries[key] = {"outcomes": [list(o[1:]) for o in done["outcomes"]] if outcomes else None,
                             "tallies": {t: _tally_out(v) for t, v in done["tallies"].items()},
                             "calibrations_computed": done["calibrations_computed"]}
        self.changed = True

    def fitted(self, seen: tuple) -> tuple[dict, int] | None:
        """A calibration fitted before on the rows `seen` (team, kind, level, fingerprint): (it, the
        number of scopes its fit read), or None."""
        kept = self.fits.get(repr(seen))
        return (dict(kept[0]), kept[1]) if kept is not None else None

    def fit(self, seen: tuple, cal: dict, scopes_read: int) -> None:
        self.fits[repr(seen)] = [dict(cal), scopes_read]
        self.new_fits = True

    def is_valid(self, i: int) -> bool:
        """Whether the window's i-th request was found valid (lib.gate.request.validate) before."""
        return i in self.known_valid

    def valid(self, i: int) -> None:
        """The window's i-th request is valid: keep that."""
        self.new_valid.append(i)

    def save(self) -> None:
        """Write the file when anything was added (a file that cannot be written is left as it was)."""
        if self.new_valid:
            self.known_valid.update(self.new_valid)
            self.new_valid = []
            self.entries.pop(self.valid_key, None)
            self.entries[self.valid_key] = sorted(self.known_valid)
            self.changed = True
        if self.new_fits:
            self.entries.pop(self.fits_key, None)
            self.entries[self.fits_key] = self.fits
            self.changed = True
        if self.changed:
            content_store.save(self.path, self.entries, KEPT_FORMAT, KEPT_ENTRIES)
            self.changed = self.new_fits = False
