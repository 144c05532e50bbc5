"""Fitted team models kept on disk between processes, so that a forecast whose histories have not changed
since the last one reads its models instead of importing statsmodels (with scipy: over a second on a quiet
machine, three and more under load) and fitting again.

Content-addressed (lib.planning.content_store): an entry's key is a SHA-256 of the weekly history (its
float64 bytes), the last week, the horizons, the origins, the model code (models.py's source)
and statsmodels' version. A history that changed, or a changed model, finds no entry. The file holds
the MAX_ENTRIES entries used last; a file that cannot be read or written is no cache: the forecast
fits as it would without one.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from lib.planning import content_store
from lib.planning.forecast import models
from lib.planning.forecast.models import TeamModel

MAX_ENTRIES = 64            # team histories kept (about 50 kB each); the least recently used go first
FORMAT = 1


@lru_cache(maxsize=1)
def _code() -> bytes:
    """What the models depend on besides their inputs: the models' source and statsmodels' version."""
    # here: the version without importing statsmodels (importing it is what the cache saves)
    from importlib.metadata import PackageNotFoundError, version
    try:
        sm = version("statsmodels")
    except PackageNotFoundError:
        sm = "none"
    return Path(models.__file__).read_bytes() + f"\0statsmodels {sm}\0format {FORMAT}".encode()


def model_key(weekly: Sequence[float], last_monday: dt.date, horizons: int = models.MAX_WEEKS,
              origins: int = models.ERROR_ORIGINS) -> str:
    """The key of the model fit_team(weekly, last_monday, horizons, origins) returns."""
    h = hashlib.sha256(_code())
    h.update(np.asarray(weekly, dtype="<f8").tobytes())
    h.update(f"{last_monday.isoformat()} {horizons} {origins}".encode())
    return h.hexdigest()


def _to_json(m: TeamModel) -> dict:
    return {"name": m["name"], "point": m["point"].tolist(), "ratios": [r.tolist() for r in m["ratios"]],
            "sums": [s.tolist() for s in m["sums"]], "scores": m["scores"]}


def _from_json(d: dict) -> TeamModel:
    def frozen(values):
        a = np.asarray(values, dtype=float)
        a.setflags(write=False)       # as fit_team's: shared by every caller
        return a
    return {"name": str(d["name"]), "point": frozen(d["point"]), "ratios": [frozen(r) for r in d["ratios"]],
            "sums": [frozen(s) for s in d["sums"]], "scores": dict(d["scores"])}


def load_models(path: Path) -> dict[str, TeamModel]:
    """The entries of the cache file at `path` (oldest use first); none if it is missing or unreadable."""
    return content_store.load(path, FORMAT, _from_json)


def save_models(path: Path, entries: dict[str, TeamModel]) -> None:
    """Write the last MAX_ENTRIES of `entries` (oldest use first) to `path`; a failure is ignored."""
    content_store.save(path, entries, FORMAT, MAX_ENTRIES, _to_json)
