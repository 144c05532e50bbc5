"""What every command of `python -m lib` prints the same way: its exit codes, its one line on stderr
and its JSON on stdout (keys sorted, stable)."""
from __future__ import annotations

import json
import sys
import time

from lib.gate.terms import json_default

EXIT_ADMIT, EXIT_DEFER, EXIT_INVALID, EXIT_FAILURE = 0, 1, 2, 3
EXIT_OK = 0


def say(message: str) -> None:
    """One line on stderr: what the command did, or why it could not."""
    print(message, file=sys.stderr, flush=True)


def dump_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, default=json_default)


class ProgressBar:
    """A dependency-free text progress bar on stderr: progress(fraction, message)."""

    def __init__(self, stream=None, width: int = 30):
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()
        self._last = -1.0

    def __call__(self, fraction: float, message: str = "") -> None:
        fraction = min(1.0, max(0.0, float(fraction)))
        if fraction < 1.0 and fraction - self._last < 0.005:
            return
        self._last = fraction
        done = int(round(fraction * self.width))
        bar = "#" * done + "-" * (self.width - done)
        elapsed = time.monotonic() - self.started
        line = f"\r[{bar}] {fraction * 100:5.1f}% {elapsed:6.1f}s {message[:60]:<60}"
        self.stream.write(line)
        if fraction >= 1.0:
            self.stream.write("\n")
        self.stream.flush()


def progress_for(args):
    """The progress bar a command draws: on a terminal, or when --progress asks for it; else None."""
    if getattr(args, "progress", False) or sys.stderr.isatty():
        return ProgressBar()
    return None
