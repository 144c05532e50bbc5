"""The queue's command line: `python -m lib COMMAND ...` (what a scheduler's submit hook calls).

Commands: check, submit, import, finish, checkpoint, recover, alerts, plan, queue, cancel, demo, export, teams, forecast, replay, slurm, authority. Global options: --db PATH (else
$GATE_DB, else data/gate.duckdb) and --progress (draw the progress bar even when stderr is not a
terminal). check/submit read the request JSON from a file or '-' (stdin) and print the decision as
JSON on stdout (keys sorted, stable). Every command ends with one line on stderr saying what it did.
A file argument must be a regular file (a FIFO is refused, not waited on); times lie in
lib.cli.args.TIME_RANGE; a usage error is one line on stderr.

`submit` checks the OS user's teams first when the access file asks for it (check_submitter).

Exit codes: 0 admit / success, 1 defer, 2 invalid request or input (message on stderr; also a --db
that is not a ledger, or names no file for a command that only reads, or a submit for a team the
access file does not give the OS user), 3 ledger locked past the
timeout, or any other gate failure (a damaged ledger, one newer than this program, or an error of
the gate's own code). Only errors raised on purpose for the user's input (InputError and its
subclasses, an unknown run, an invalid teams file, a file that is not a ledger) exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from lib.cli.output import EXIT_ADMIT, EXIT_DEFER, EXIT_FAILURE, EXIT_INVALID, EXIT_OK, dump_json, say
from lib.cli.output import progress_for as _progress
from lib.cli.alerts import ALERT_COMMANDS, add_alert_parser
from lib.cli.plan import PLAN_COMMANDS, add_plan_parser
from lib.cli.queue import QUEUE_COMMANDS, add_queue_parsers
from lib.cli.replay import REPLAY_COMMANDS, add_replay_parser
from lib.cli.runs import RUN_COMMANDS, add_run_parsers
from lib.cli.slurm import SLURM_COMMANDS, add_slurm_parser, cmd_teams_from_slurm
from lib.cli.authority import AUTHORITY_COMMANDS, add_authority_parser
from lib.authority.settings import configured_authority
from lib.cli.args import TIME_RANGE, nonneg_float, nonneg_int, positive_int, timestamp, weeks
from lib.gate.access import access_path, command_line_access, teams_for
from lib.gate.contracts import Decision
from lib.gate.reasons import summary
from lib.gate.terms import (FORMULA_PREFIX_REGEX, MAX_JSON_DEPTH,
                            SUBMIT_CLOCK_WINDOW, InputError, checked_submit_time, json_default, json_depth)
from lib.ledger.audit import command_line, os_actor, os_user, unix_groups
from lib.ledger.decider_lock import ServerBusy
from lib.ledger.connection import LedgerError, LedgerLocked, NotALedger, check_ledger_file, ledger_path, open_ledger
from lib.ledger.files import open_regular, regular_file_problem
from lib.ledger.finishing import UnknownRun
from lib.ledger.teams_file import DEFAULT_TEAMS_FILE, TeamsFileError, sync_teams
from lib.slurm.journal import drain_left_over_journal
from lib.slurm.settings import MAX_TIMEOUT_S, ORIGINS
from lib.slurm.wire import ask

MAX_REQUEST_BYTES = 1_000_000


# ------------------------------------------------------------------------------ output helpers

def read_request(source: str):
    """The request JSON from a regular file or '-' (stdin); InputError when it is unreadable (a FIFO or
    a directory among them: refused before reading, never waited on)."""
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        else:
            with open_regular(source) as f:
                raw = f.read(MAX_REQUEST_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read request {source}: {exc.strerror or exc}") from None
    if len(raw) > MAX_REQUEST_BYTES:
        raise InputError(f"request {source} is larger than {MAX_REQUEST_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"request {source} is not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise InputError(f"request {source} is empty")

    def no_constants(name):
        raise ValueError(f"{name} is not a JSON number")
    if json_depth(text, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:  # before parsing: no recursion to run out of
        raise InputError(f"request {source} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=no_constants)
    except json.JSONDecodeError as exc:
        raise InputError(f"request {source} is not valid JSON: {exc.msg} at line {exc.lineno}, "
                         f"column {exc.colno}") from None
    except ValueError as exc:
        raise InputError(f"request {source} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"request {source} is nested too deeply to be a request") from None


# ------------------------------------------------------------------------------ commands

def _decision_exit(decision: Decision) -> int:
    return {"admit": EXIT_ADMIT, "defer": EXIT_DEFER}.get(decision["state"], EXIT_INVALID)


def _report_decision(decision: Decision, verb: str) -> None:
    print(dump_json(decision))
    if decision["state"] != "admit":
        say(summary(decision))


def via_gate_server(args, op: str, request) -> Decision | None:
    """The decision of the warm gate server on $TG_GATE_SOCKET (lib.slurm.server), the one decider
    while it runs; None when no server listens there (then decide in-process). Without a server,
    first moves into the ledger what a stopped server journaled (lib.slurm.journal.drain_left_over_journal);
    a server that holds the ledger but does not listen is a gate failure for submit."""
    sock = os.environ.get("TG_GATE_SOCKET")
    if sock:
        config = {"op": op, "db": str(ledger_path(args.db).resolve()), "origin": getattr(args, "origin", "cli"),
                  "request": json.dumps(request, default=json_default, ensure_ascii=False),
                  "now": args.now.isoformat() if args.now is not None else None,
                  # the server waits for a ledger at most MAX_TIMEOUT_S, and a little more than none
                  "timeout_s": min(max(args.timeout, 0.01), MAX_TIMEOUT_S)}
        got = ask(sock, config, timeout_s=args.timeout + 30)
        if got is not None:
            code, rest = got
            if code == EXIT_INVALID:  # the server found the input invalid (a setting, a time)
                raise InputError(f"gate server {sock}: {rest}")
            if code != 0:
                raise LedgerError(f"gate server {sock}: {rest}")
            return json.loads(rest)
    try:
        drain_left_over_journal(args.db, timeout_s=args.timeout)
    except ServerBusy:
        if op == "submit":
            raise
    return None


def cmd_check(args) -> int:
    # here: they bring numpy (calibration), which finish, teams, export and --help never need
    from lib.ledger.deciding import check_request
    from lib.ledger.plan import check_request_at
    request = read_request(args.request)
    if args.as_of is not None:   # on the plan's state then: the gate server decides for now only
        decision = check_request_at(request, at=args.as_of, db=args.db, now=args.now, timeout_s=args.timeout)
    else:
        decision = via_gate_server(args, "check", request)
    if decision is None:
        decision = check_request(request, db=args.db, now=args.now, timeout_s=args.timeout,
                                 authority=configured_authority())
    _report_decision(decision, "check")
    again = f", already recorded at {decision['recorded_at']}" if decision.get("replayed") else ""
    say(f"check: {decision['state']} {decision['run_id']}{again} (what-if: nothing written)")
    return _decision_exit(decision)


def check_submitter(request, path=None) -> None:
    """When the access file (lib.gate.access: $GATE_ACCESS, else data/access.toml) sets
    check_command_line, the OS user may submit only for the teams it names the user or one of their Unix
    groups in: InputError otherwise. A guard against mistakes, not a boundary (whoever can write the
    ledger file can write it directly); on a shared login node the gate server is the boundary."""
    path = access_path(path)
    access = command_line_access(path)
    if access is None:
        return
    user = os_user()
    allowed = teams_for(access, user, unix_groups(user))
    team = request.get("team") if isinstance(request, dict) else None
    if team not in allowed:
        named = f"team {team!r}" if isinstance(team, str) else "a request that names no team"
        raise InputError(f"user {user} may not submit {named}: the access file {path} gives {user} "
                         + (f"the teams {', '.join(allowed)}" if allowed else "no team"))


def cmd_submit(args) -> int:
    from lib.ledger.deciding import submit_request  # here: as in cmd_check
    args.now = checked_submit_time(args.now)  # a recorded decision is dated now, give or take minutes
    request = read_request(args.request)
    check_submitter(request)
    decision = via_gate_server(args, "submit", request)
    if decision is None:
        decision = submit_request(request, db=args.db, origin=args.origin, now=args.now,
                                  timeout_s=args.timeout, actor=os_actor(), authority=configured_authority())
    _report_decision(decision, "submit")
    if decision.get("replayed"):
        say(f"submit: {decision['state']} {decision['run_id']}: this same request was decided at "
            f"{decision['recorded_at']}; answered that recorded decision, nothing new written")
    elif decision["state"] == "admit":
        say(f"submit: admit {decision['run_id']}: recorded the decision and a reservation of "
            f"{decision['reserved_gpu_hours']:.2f} GPU-h for {decision['estimate']['wall_hours']:.2f} h")
    else:
        say(f"submit: {decision['state']} {decision['run_id']}: recorded the decision, "
            "no reservation")
    return _decision_exit(decision)


def cmd_import(args) -> int:
    problem = regular_file_problem(args.file)
    if problem:  # a FIFO would block the importer, a directory fail it late
        raise InputError(f"{args.file} {problem}; nothing written")
    try:  # here: the importer brings pandas and pyarrow, which may be missing; the other commands run without
        from lib.ledger.imports import import_runs
    except ImportError as exc:
        raise LedgerError(f"the importer is not available: {exc}") from None
    report = import_runs(args.file, fmt=args.format, db=args.db, create_teams=args.create_teams,
                         dry_run=args.dry_run, progress=_progress(args), timeout_s=args.timeout)
    if report.errors:
        for e in report.errors:
            say(f"line {e.get('line')}, column {e.get('column')}, value {e.get('value')!r}: "
                f"{e.get('message')}")
        say(f"import: refused {args.file}: {len(report.errors)} problem(s); nothing written")
        return EXIT_INVALID
    what = "would insert" if args.dry_run else "inserted"
    say(f"import: {what} {report.inserted}, updated {report.updated}, unchanged {report.unchanged} "
        f"run(s) from {args.file} ({report.fmt})" + (" — dry run, nothing written" if args.dry_run else ""))
    return EXIT_OK


def cmd_demo(args) -> int:
    from lib.ledger.demo import HISTORY_DAYS, MIN_DAYS, build_demo  # here: it brings numpy and pandas
    days = HISTORY_DAYS if args.days is None else args.days
    if days < MIN_DAYS:
        raise InputError(f"--days: at least {MIN_DAYS} days of history, got {days}")
    t0 = time.monotonic()
    counts = build_demo(args.db, runs=args.runs, seed=args.seed, progress=_progress(args),
                        teams_file=args.teams_file, days=days)
    say(f"demo: inserted {counts['runs']:,} runs, {counts['decisions']:,} decisions "
        f"({counts['deferred']:,} deferred), {counts['pilots']:,} pilots; replaced "
        f"{counts['deleted_runs']:,} earlier demo runs; teams +{counts['teams_inserted']} "
        f"~{counts['teams_updated']} in {time.monotonic() - t0:.1f} s -> {ledger_path(args.db)}")
    return EXIT_OK


def export_query(con, what: str, neutralize: bool) -> str:
    """SELECT for the export of `what`; text cells that a spreadsheet would run as a formula
    (starting with = + - @ tab or CR) get a leading apostrophe when `neutralize`."""
    cols = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = ? ORDER BY ordinal_position", [what]).fetchall()
    parts = []
    for name, dtype in cols:
        q = f'"{name}"'
        if neutralize and (dtype == "VARCHAR" or dtype.endswith("[]")):
            text = q if dtype == "VARCHAR" else f"CAST({q} AS VARCHAR)"
            parts.append(f"CASE WHEN regexp_matches({text}, '{FORMULA_PREFIX_REGEX}') "
                         f"THEN '''' || {text} ELSE {text} END AS {q}")
        else:
            parts.append(q)
    order = "run_id" if what == "runs" else "decision_id"
    return f"SELECT {', '.join(parts)} FROM {what} ORDER BY {order}"


def cmd_export(args) -> int:
    fmt = args.format
    if fmt == "parquet" and (not args.out or args.out == "-"):
        raise InputError("export --format parquet needs --out PATH (Parquet is binary)")
    to_stdout = not args.out or args.out == "-"
    with open_ledger(args.db, read_only=True, timeout_s=args.timeout) as con:
        query = export_query(con, args.what, neutralize=(fmt == "csv"))
        rows = con.execute(f"SELECT count(*) FROM {args.what}").fetchall()[0][0]
        opts = "FORMAT csv, HEADER true" if fmt == "csv" else "FORMAT parquet"
        if to_stdout:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"export.{fmt}"
                con.execute(f"COPY ({query}) TO '{_sql_path(path)}' ({opts})")
                sys.stdout.flush()
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
        else:
            out = Path(args.out)
            if out.parent and not out.parent.exists():
                raise InputError(f"export: folder {out.parent} does not exist")
            con.execute(f"COPY ({query}) TO '{_sql_path(out)}' ({opts})")
    say(f"export: wrote {rows:,} {args.what} rows as {fmt} to {'stdout' if to_stdout else args.out}")
    return EXIT_OK


def _sql_path(p) -> str:
    return str(p).replace("'", "''")


def cmd_teams(args) -> int:
    if args.from_slurm:  # a proposal the planner reviews like code: nothing is written
        return cmd_teams_from_slurm(args)
    who = command_line(Path(args.file or DEFAULT_TEAMS_FILE).name)
    with open_ledger(args.db, read_only=False, timeout_s=args.timeout) as con:
        c = sync_teams(con, args.file, who=who, progress=_progress(args))
    for warning in c["warnings"]:
        say(f"teams: warning: {warning}")
    say(f"teams: inserted {c['teams_inserted']}, updated {c['teams_updated']}, unchanged "
        f"{c['teams_unchanged']} team(s); snapshots inserted {c['snapshots_inserted']}, updated "
        f"{c['snapshots_updated']}, unchanged {c['snapshots_unchanged']}; pools {c['pools']}")
    return EXIT_OK


# ------------------------------------------------------------------------------ parser

def cmd_forecast(args) -> int:
    """Weekly demand P50/P90 per team for the next --weeks weeks and this month's burn-down, as JSON;
    --as-of forecasts from only what the ledger knew then."""
    from lib.ledger.forecast import forecast  # here: it brings numpy and pandas (and statsmodels to fit)
    result = forecast(args.db, as_of=args.as_of, weeks=args.weeks)
    history = result.pop("history")  # the weekly usage behind it: a table, not part of the JSON
    print(dump_json(result))
    short = sorted(t for t, e in result["teams"].items() if (e.get("burn_down") or {}).get("exhausts_p50"))
    say(f"forecast: {len(result['teams'])} teams, {args.weeks} weeks from {result['as_of']:%Y-%m-%d %H:%M} "
        f"({len(history):,} team-weeks of history); projected (P50) to use up this month's budget: "
        + (", ".join(short) if short else "none"))
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors are bad input: exit 2, one line on stderr
        say(f"{self.prog}: error: {message} (usage: {self.prog} --help)")
        raise SystemExit(EXIT_INVALID)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS,
                        help="ledger file (default: $GATE_DB, else data/gate.duckdb)")
    common.add_argument("--progress", action="store_true", default=argparse.SUPPRESS,
                        help="draw the progress bar even when stderr is not a terminal")
    common.add_argument("--timeout", type=nonneg_float, default=argparse.SUPPRESS,
                        help="seconds to wait for a ledger another process holds (default 10)")
    p = _Parser(prog="python -m lib", description=__doc__.split("\n\n")[0], parents=[common],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    for name, helptext in (("check", "the what-if: decide, write nothing"),
                           ("submit", "decide and record (a reservation on admit)")):
        s = sub.add_parser(name, parents=[common], help=helptext)
        s.add_argument("request", help="request JSON file (a regular file), or - for stdin")
        s.add_argument("--now", type=timestamp, default=None,
                       help=f"decide as of this ISO-8601 time ({TIME_RANGE}) instead of now" + (
                           f"; a decision to record must be dated within "
                           f"{SUBMIT_CLOCK_WINDOW.total_seconds() / 60:g} minutes of the present"
                           if name == "submit" else ""))
        if name == "submit":
            s.add_argument("--origin", default="cli", choices=ORIGINS,
                           help="who submitted (recorded with the decision)")
        else:
            s.add_argument("--as-of", type=timestamp, default=None,
                           help=f"decide as if submitted at this ISO-8601 time ({TIME_RANGE}), on the state "
                                "the forward plan reaches by then (from --now): what has ended, and what the "
                                "plan starts before it")

    s = sub.add_parser("import", parents=[common], help="import run history (CSV or sacct)")
    s.add_argument("file", help="the run history, a regular file")
    s.add_argument("--format", choices=("csv", "sacct"), default="csv")
    s.add_argument("--create-teams", action="store_true", help="create unknown teams instead of refusing")
    s.add_argument("--dry-run", action="store_true", help="validate and preview, write nothing")

    add_run_parsers(sub, common)
    add_authority_parser(sub, common)
    add_alert_parser(sub, common)
    add_plan_parser(sub, common)
    add_queue_parsers(sub, common)

    s = sub.add_parser("demo", parents=[common], help="build the demo history (replaces an earlier demo)")
    s.add_argument("--runs", type=positive_int, default=10_000)
    s.add_argument("--seed", type=nonneg_int, default=0)
    s.add_argument("--days", type=positive_int, default=None,
                   help="days of history the runs spread over (default 730; at least 60)")
    s.add_argument("--teams-file", default=None, help="teams file (default data/teams.toml)")

    s = sub.add_parser("export", parents=[common], help="export runs or decisions as CSV or Parquet")
    s.add_argument("--what", choices=("runs", "decisions"), default="runs")
    s.add_argument("--format", choices=("csv", "parquet"), default="csv")
    s.add_argument("--out", help="output file (CSV default: stdout)")

    s = sub.add_parser("forecast", parents=[common],
                       help="weekly demand (P50/P90) and this month's budget burn-down per team, one demand "
                            "model for both, as JSON")
    s.add_argument("--weeks", type=weeks, default=8, help="weeks ahead (default 8, at most 26)")
    s.add_argument("--as-of", type=timestamp, default=None,
                   help=f"forecast from the ledger's data up to this ISO-8601 time ({TIME_RANGE}) only")

    add_replay_parser(sub, common)

    s = sub.add_parser("teams", parents=[common], help="load data/teams.toml into the ledger")
    s.add_argument("--file", default=None, help="teams file, a regular file (default data/teams.toml)")
    s.add_argument("--from-slurm", action="store_true", help="print the [pools] proposed from sinfo; write nothing")
    add_slurm_parser(sub, common)
    return p


COMMANDS = {"check": cmd_check, "submit": cmd_submit, "import": cmd_import, **RUN_COMMANDS, **ALERT_COMMANDS,
            **PLAN_COMMANDS, **QUEUE_COMMANDS,
            "demo": cmd_demo, "export": cmd_export, "teams": cmd_teams, "forecast": cmd_forecast,
            **REPLAY_COMMANDS, **SLURM_COMMANDS, **AUTHORITY_COMMANDS}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    for name, default in (("db", None), ("progress", False), ("timeout", 10.0)):
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        check_ledger_file(args.db)  # a wrong --db is refused before anything is made next to it
        return COMMANDS[args.command](args)
    except LedgerLocked as exc:
        say(f"{args.command}: {exc}")
        return EXIT_FAILURE
    except (InputError, UnknownRun, TeamsFileError, NotALedger) as exc:
        say(f"{args.command}: {exc}")
        return EXIT_INVALID
    except LedgerError as exc:
        say(f"{args.command}: gate failure: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        say(f"{args.command}: interrupted")
        return EXIT_FAILURE
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - a scheduler hook needs an exit code, not a traceback
        say(f"{args.command}: gate failure: {type(exc).__name__}: {exc}")
        return EXIT_FAILURE
