"""Slurm's submit hook for the gate, as Python starts it: a job description in, the gate's answer out.

`lib/slurm/job_submit.lua` runs it for every job that requests GPUs when it cannot ask the warm gate
server itself (imported, so its bytecode is cached; `python -S lib/slurm/hook.py ARGS` does the same):

    <python> -S -c 'import sys, lib.slurm.hook as h; sys.exit(h.main())' --account A --partition P
             --time-limit MIN --name N --comment C --tres-per-node ... --tres-per-job ... --num-tasks ...

(the job fields: lib.slurm.wire.JOB_FIELDS). It answers on stdout with protocol lines the Lua reads, plus
an exit code:

    MSG <one readable line for the user>     NAME <run id: becomes the job name>
    MSG <on an admit, from the warm gate server: the team's month budget left and its projected run-out
         day, one line (lib.slurm.runouts.budget_text)>
    TIME <minutes: becomes the job's time limit: the comment's runtime for a job without --time, or a
          lower one from the spend limit or the calibrated wall clock, lib.slurm.limits>
    FLAG <admin comment for a flagged job>
    HOLD <admin comment of a job accepted held: the warm gate server's, lib.slurm.holds>
    exit 0 admitted | 1 refused by the gate | 3 gate failed, refused | 4 gate failed, accepted and flagged
         | 5 deferred, accepted held until the gate admits it (TG_ON_DEFER=refuse: exit 1 instead)

What is judged, how, and the failure policy (TG_ON_GATE_FAILURE): lib.slurm.judge.

Speed: Lua starts this with `python -S` (no site .pth processing). This module is the socket client:
it imports only os, sys and lib.slurm.wire (_socket, time). When a warm gate server is listening on
TG_GATE_SOCKET (`python -m lib.slurm.server --socket PATH`, started by cluster.sh), it only forwards
the job description to it and relays the answer; a server that takes the job but does not answer is
a gate failure (never decided twice). With no server listening it adds site-packages and judges the
job in-process (lib.slurm.in_process: imports DuckDB, slower, the same answer). The server decides
from live state in memory and journals each decision before it answers (lib.slurm.live).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # run as a file (`python -S lib/slurm/hook.py`): import lib from the repo, not from lib/slurm itself
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        sys.path[0] = os.path.dirname(os.path.dirname(_here))

from lib.slurm.wire import JOB_FIELDS, exchange  # after the path above: run as a file, lib/slurm is first on it


class Answer:
    """The warm server's answer as the client relays it: its exit code and protocol lines."""

    def __init__(self, code: int, lines: list[str]):
        self.code, self._lines = code, list(lines)

    def lines(self) -> list[str]:
        return list(self._lines)


def config_from_env(env=None) -> dict:
    """The hook's settings from the environment (TG_GATE_TIMEOUT_S in seconds)."""
    env = os.environ if env is None else env
    return {
        "db": env.get("GATE_DB") or None,
        "on_failure": (env.get("TG_ON_GATE_FAILURE") or "refuse").strip(),
        "timeout_s": _float(env.get("TG_GATE_TIMEOUT_S"), 5.0),
        "flag_log": env.get("TG_FLAG_LOG") or None,
        "default_partition": env.get("TG_DEFAULT_PARTITION") or None,
        "socket": env.get("TG_GATE_SOCKET") or None,
        "on_defer": env.get("TG_ON_DEFER") or None,
    }


def _float(text, default):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def parse_args(argv: list[str]) -> dict:
    """--key value pairs (dashes -> underscores) into the job description dict. No argparse: faster."""
    fields: dict = {}
    i = 0
    while i < len(argv):
        key = argv[i]
        if not key.startswith("--") or i + 1 >= len(argv):
            raise SystemExit(f"lib.slurm.hook: bad argument {key!r}")
        name = key[2:].replace("-", "_")
        if name not in JOB_FIELDS:
            raise SystemExit(f"lib.slurm.hook: unknown field {key!r}")
        value = argv[i + 1]
        fields[name] = value if value != "" else None
        i += 2
    return fields


def _emit(answer) -> int:
    """Print an Answer's (or a lib.slurm.judge.Judged's) lines; its exit code."""
    sys.stdout.write("".join(line + "\n" for line in answer.lines()))
    sys.stdout.flush()
    return answer.code


def ask_server(socket_path: str, fields: dict, env_config: dict, timeout_s: float) -> Answer | None:
    """The warm server's Answer (timeout_s: seconds for the whole exchange), or None when no server
    listens (then judge in-process). A server that took the job and did not answer raises."""
    got = exchange(socket_path, fields, env_config, timeout_s)
    if got is None:
        return None
    code, rest = got
    return Answer(code, [ln for ln in rest.split("\n") if ln])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        # the older way to start the warm gate server: this process becomes `python -m
        # lib.slurm.server` (no import of it here: the server imports this module)
        os.execv(sys.executable, [sys.executable, "-m", "lib.slurm.server", *argv[1:]])
    fields = parse_args(argv)
    config = config_from_env()
    if config["socket"]:
        try:
            answer = ask_server(config["socket"], fields, config, config["timeout_s"] + 8)
        except Exception as exc:  # the server took the job but did not answer: do not decide twice
            _cold_imports()
            # here, not at the top: the socket client starts without the judge (it brings DuckDB)
            from lib.slurm.judge import failure
            return _emit(failure(fields, config, f"gate server did not answer ({type(exc).__name__}: {exc})"))
        if answer is not None:
            return _emit(answer)
    _cold_imports()
    # here, not at the top: only the cold path decides in this process (DuckDB, the gate)
    from lib.slurm.in_process import judge_in_process
    return _emit(judge_in_process(fields, config))


def _cold_imports() -> None:
    """Started with -S (no site): add site-packages the way a normal start would, before the judge's
    imports (DuckDB)."""
    if "duckdb" in sys.modules:
        return
    import site  # only now: the hook starts with -S and needs site-packages only to judge here
    if not any(p.endswith("site-packages") for p in sys.path):
        site.main()


if __name__ == "__main__":
    sys.exit(main())
