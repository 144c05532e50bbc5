"""What every command of `python -m lib` prints the same way: its exit codes, its one line on stderr
and its JSON on stdout (keys sorted, stable)."""
from __future__ import annotations

import json
import sys

from lib.gate.terms import json_default

EXIT_ADMIT, EXIT_DEFER, EXIT_INVALID, EXIT_FAILURE = 0, 1, 2, 3
EXIT_OK = 0


def say(message: str) -> None:
    """One line on stderr: what the command did, or why it could not."""
    print(message, file=sys.stderr, flush=True)


def dump_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, default=json_default)
