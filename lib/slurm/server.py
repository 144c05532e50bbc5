"""The warm gate server: one process answers Slurm's submit hook and `python -m lib check|submit` for
the ledgers it serves, from live state in memory (lib.slurm.live), over a Unix socket.

    python -m lib.slurm.server --socket PATH [--db LEDGER] [--journal-max-mb MB]
                                   [--journal-sync FULL|NORMAL] [--flush-interval-s S]
                                   [--windows-interval-s S] [--queue-interval-s S]

--windows-interval-s (else $TG_WINDOWS_INTERVAL_S, else 30): how often each ledger's gate reads the
cluster's reservations from Slurm (lib.slurm.live; 0: never, the ledger's windows only).
--queue-interval-s (else $TG_QUEUE_INTERVAL_S, else 30): how often each ledger's queue keeper admits
the requests whose turn has come and releases their held jobs (lib.slurm.queue_keeper; 0: never, and
then deferred jobs are refused). $TG_ON_DEFER=refuse (or a hook's on_defer=refuse) refuses deferred
jobs as before; by default a deferral only time cures is accepted held (lib.slurm.holds).

A job the hook sends is judged by lib.slurm.judge.judge_job with its ledger's LiveGate as the decider;
the decision's journal entry is settled once the answer went out (or not).

The socket is created owner-only (mode 0600): only the Slurm user (and root) can talk to it; the
caller's uid and pid (SO_PEERCRED) are kept with every decision in the journal. Decisions are taken
one at a time.

Connections (lib.slurm.reader): WORKERS threads each accept a connection and answer it on the same
thread when its whole message arrives within READ_TIMEOUT_S (the hook sends it at once: no hand-off
between threads). Any other goes to one slow-reader thread, so idle or trickling callers never hold
up a worker: a message must end (the caller's EOF) within MESSAGE_DEADLINE_S of its accept and stay
under MAX_MESSAGE bytes, else it gets a refusal; the server goes on. LISTEN_BACKLOG connections may
wait to be accepted (a burst); the client (lib.slurm.wire.exchange) tries again briefly when even
that is full.

Settings (lib.slurm.settings): every "c:" setting a caller sends is checked before anything is
decided (timeout_s finite in (0, 60], origin and op from fixed lists, now within the clock window for
a submit, no unknown key); a bad one is refused naming the setting and its value, whatever the
failure policy (never accepted-and-flagged). The flag log is the server's own: $TG_FLAG_LOG in its
environment at start. A c:flag_log a caller sends is ignored, never written to.

Wire format (lib.slurm.wire): NUL-separated "f:<job field>", value, ..., "c:<setting>", value. The
hook sends job fields; the command line sends c:op (check | submit), c:request (the request JSON),
c:origin, c:now; c:op=flush moves everything journaled for c:db into the ledger now, batch after
batch, when this server serves that ledger (tests; the epilog; an operator before reading the
ledger), and answers how many it moved, or exit 3 saying how many remain. A clean stop (SIGTERM)
drains every journal likewise, logs how many it moved, and exits 1 when some remain. Answers: "<exit code>\\n" then
the hook's protocol lines (exit 3 for a bad setting), or for op requests: the decision JSON (exit
0), a line naming a bad setting (exit 2: invalid input, as the command line's own), or an error line
(exit 3: the gate failed). Any value in c:request is the
decision's to judge (a reject names the field); a c:request nested deeper than 64 levels is
rejected before it is parsed (a reject decision, nothing journaled); text that is not JSON is an
error line.
"""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from lib.authority.settings import configured_authority
from lib.authority.store import AuthoritySchemaError, AuthorityUnavailable, connect
from lib.authority.url import AuthoritySettingError
from lib.gate.admission import reject
from lib.gate.reasons import reason
from lib.gate.terms import JSONTooDeep, json_text, loads_bounded, naive_utc, utcnow
from lib.ledger.connection import LedgerLocked, ledger_path
from lib.slurm.runouts import RunOuts, budget_text, month_budget
from lib.slurm.comment import build_request
from lib.slurm.holds import hold_fit, held_message, hold_choice, hold_comment, place_text
from lib.slurm.hook import config_from_env
from lib.slurm.journal import JournalError
from lib.ledger.decider_lock import ServerBusy
from lib.slurm.judge import Judged, failure, judge_job
from lib.slurm.live import LiveGate
from lib.slurm.queue_keeper import QUEUE_INTERVAL_S, QueueKeeper, on_defer_setting
from lib.slurm.reader import Message, SlowReader, read_bounded
from lib.slurm.settings import SettingError, caller_settings
from lib.slurm.windows_sync import DEFAULT_INTERVAL_S
from lib.slurm.wire import EXIT_ACCEPTED, EXIT_FAILED_REFUSED, EXIT_HELD, EXIT_REFUSED, JOB_FIELDS, decode_request

TIMING = bool(os.environ.get("TG_GATE_SERVER_TIMING"))  # one stderr line per connection: where time goes
OP_INVALID = 2           # an op request with a bad setting (the command line's "invalid input")
WORKERS = 8               # connections answered at once (decisions themselves are taken one at a time)
REPLY_TIMEOUT_S = 5.0
LISTEN_BACKLOG = 4096      # connections waiting for accept (the kernel caps it at net.core.somaxconn)


class GateServer:
    """The LiveGate of each ledger asked about (created on first use), and the socket's handler.
    `flag_log`: the server's own flag log (its $TG_FLAG_LOG at start); a caller's is never used."""

    def __init__(self, *, journal_max_mb: float | None = None, journal_sync: str = "FULL",
                 flush_interval_s: float = 0.25, flag_log: str | None = None,
                 windows_interval_s: float | None = None, authority=None, queue_interval_s: float | None = None,
                 on_defer: str = "hold"):
        self.gates: dict[Path, LiveGate] = {}
        self.keepers: dict = {}      # ledger key -> QueueKeeper: held jobs released (None/0 interval: none, refuse)
        self.queue_interval_s, self.on_defer = queue_interval_s, on_defer
        self.runouts: dict = {}      # ledger key -> RunOuts: the admit's budget line's run-out days
        self.authority = authority  # lib.authority.facts.Authority: each ledger's LiveGate gets its own connection
        self._loading: dict[Path, threading.Lock] = {}
        self._mu = threading.Lock()
        self.journal_max_mb, self.journal_sync = journal_max_mb, journal_sync
        self.flush_interval_s, self.flag_log = flush_interval_s, flag_log
        self.windows_interval_s = windows_interval_s
        self.slow = SlowReader(self.answer, _refuse_unreadable)  # started by serve()

    def gate_for(self, db, timeout_s: float = 5.0) -> LiveGate:
        """The ledger's LiveGate, loaded on first use. A load (up to `timeout_s` for a held ledger)
        holds up only callers of that ledger, never those of a ledger already served."""
        path = ledger_path(db).resolve()
        key = _ledger_key(path)
        with self._mu:
            live = self.gates.get(key)
            if live is not None:
                return live
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._mu:
                live = self.gates.get(key)
            if live is None:
                live = LiveGate(path, timeout_s=timeout_s, journal_max_mb=self.journal_max_mb,
                                journal_sync=self.journal_sync,
                                flush_interval_s=self.flush_interval_s,
                                windows_interval_s=self.windows_interval_s, authority=self.authority)
                keeper = None
                if self.queue_interval_s:
                    keeper = QueueKeeper(live, interval_s=self.queue_interval_s, on_defer=self.on_defer)
                with self._mu:
                    self.gates[key] = live
                    self.runouts[key] = RunOuts(live.db)
                    self.keepers[key] = keeper
                if keeper is not None:
                    keeper.start()
                self.runouts[key].get(utcnow())   # computed in the background before the first admit asks
            return live

    def close(self) -> int:
        """Every ledger's journal drained (LiveGate.close); how many decisions stay in the journals."""
        with self._mu:
            for keeper in self.keepers.values():   # no queue pass writes while the journals drain
                if keeper is not None:
                    keeper.stop()
            left = sum(live.close() for live in self.gates.values())
            self.gates.clear()
        return left

    # ------------------------------------------------------------------ one connection

    def handle(self, conn: socket.socket) -> None:
        """On the worker that accepted `conn` (the fast path, lib.slurm.reader): a caller that sends
        its whole message at once is answered here; the slow reader takes any other."""
        msg = Message(conn)
        try:
            complete = read_bounded(conn, msg)
        except (OSError, ValueError) as exc:
            _refuse_unreadable(conn, exc)
            self.slow.add(conn, None)  # it drains what the caller still sends: no worker waits for that
            return
        if complete:
            self.answer(conn, msg)
        else:
            self.slow.add(conn, msg)

    def answer(self, conn: socket.socket, msg: Message) -> None:
        """Decide on a whole message and answer it; then note whether the answer went out."""
        with conn:
            conn.settimeout(REPLY_TIMEOUT_S)
            got, config = decode_request(msg.data())
            op = config.get("op")
            seq = None
            try:
                config = caller_settings(config)
            except SettingError as exc:  # refused before anything is decided, whatever the policy
                if op is None:
                    fields = {k: got.get(k) for k in JOB_FIELDS}
                    _send(conn, _hook_answer(failure(fields, {"on_failure": "refuse",
                                                              "flag_log": self.flag_log}, str(exc))))
                else:
                    _send(conn, f"{OP_INVALID}\n{exc}\n")
            else:
                if op is None:
                    seq = self._hook(conn, got, config, msg.caller)
                else:
                    seq = self._op(conn, op, config, msg.caller)
            answered_ms = (time.perf_counter() - msg.t0) * 1000
            if seq is not None:
                seq[0].settle(seq[1], answered=seq[2])
        if TIMING:
            print(f"lib.slurm.server: answered in {answered_ms:.2f} ms, settled at "
                  f"{(time.perf_counter() - msg.t0) * 1000:.2f} ms{' (slow reader)' if msg.slow else ''}",
                  file=sys.stderr, flush=True)

    def _hook(self, conn, got: dict, config: dict, caller):
        """Judge a job (lib.slurm.judge) with the ledger's LiveGate and answer it; (the gate, the
        journal entry to settle, whether the answer went out), or None when there is none to settle."""
        fields = {k: got.get(k) for k in JOB_FIELDS}
        config = {**config_from_env({}), **config, "flag_log": self.flag_log}
        try:
            live = self.gate_for(config.get("db"), config.get("timeout_s") or 5.0)
        except Exception as exc:  # the ledger cannot be loaded (locked, missing) or another server has it
            judged = failure(fields, config, f"{type(exc).__name__}: {exc}")
        else:
            judged = judge_job(fields, config, live, caller=caller)
            if judged.code == EXIT_REFUSED and judged.decision and judged.request is not None:
                judged = self._held(live, judged, fields, config)
            if judged.code == EXIT_ACCEPTED and judged.decision and judged.request is not None:
                # the request's kind: the facts the budget line reads
                judged = replace(judged, budget=self._budget_line(live, judged.decision, judged.request.get("kind")))
        sent = _send(conn, _hook_answer(judged))
        return (live, judged.seq, sent) if judged.seq is not None else None

    def _held(self, live: LiveGate, judged: Judged, fields: dict, config: dict) -> Judged:
        """A deferral only time cures, of a job that can fit some day, as a held job (lib.slurm.holds),
        when this ledger has a queue keeper to release it and neither the server's TG_ON_DEFER nor the
        caller's on_defer says refuse; else the refusal as judged (a job that never fits says so)."""
        keeper = self.keepers.get(_ledger_key(live.db))
        decision, request = judged.decision, judged.request
        on_defer = "refuse" if keeper is None or "refuse" in (self.on_defer, config.get("on_defer")) else "hold"
        if on_defer == "refuse" or decision.get("state") != "defer":
            return judged
        team, now = decision.get("team"), utcnow().replace(microsecond=0)
        policy = live.policy(team)
        try:
            with live.decisions_turn:
                state = live.state(team, now, request.get("kind"), request.get("capacity")) if policy else {}
            fit = hold_fit(decision, request, policy, state, now)
        except Exception as exc:  # the refusal as judged: never held on a guess
            print(f"lib.slurm.server: no hold: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return judged
        hold, why = hold_choice(decision, on_defer, fit)
        if hold and request["run_id"] in keeper.watched:   # one held job a run: a second would be released too
            hold, why = False, ("already waits in Slurm's queue as a held job of the same run ID (to replace "
                                "it, scancel it and submit again after the gate's next pass)")
        if not hold:
            return replace(judged, msg=f"{judged.msg} (not held: it {why})") if why else judged
        codes = [r.get("code") for r in decision.get("reasons") or []]
        planned = fit[0] if fit is not None and fit[0] is not None and fit[0] > now else None
        where = place_text(team, None, planned)
        _, time_to_set, _ = build_request(fields, default_partition=config["default_partition"])
        keeper.held(request["run_id"], now)
        return replace(judged, code=EXIT_HELD, msg=held_message(request["run_id"], team, codes, where),
                       name=request["run_id"], time_min=time_to_set,
                       hold=hold_comment(request["run_id"], keeper.tag, where, codes))

    def _budget_line(self, live: LiveGate, decision: dict, kind: str | None) -> str | None:
        """The admit's budget line (lib.slurm.runouts.budget_text): the month's budget left as this gate
        counts it now, and the run-out days kept warm (lib.slurm.runouts); None when it cannot be said."""
        team, now = decision.get("team"), utcnow()
        try:
            numbers = month_budget(live, team, kind, now)
            if numbers is None:
                return None
            days = self.runouts[_ledger_key(live.db)].get(now)
        except Exception as exc:  # the answer goes out without the line, never refused for it
            print(f"lib.slurm.server: no budget line: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return None
        budget, spent, held = numbers
        return budget_text(team, budget, budget - spent - held, None if days is None else days.get(team, (None, None)))

    def _op(self, conn, op: str, config: dict, caller):
        try:
            if op == "flush":  # only a ledger this server already serves
                live = self.gates.get(_ledger_key(ledger_path(config.get("db")).resolve()))
                moved, left = live.drain() if live is not None else (0, 0)
                if left:
                    _send(conn, f"{EXIT_FAILED_REFUSED}\n{moved} decision(s) moved into the ledger, {left} remain in "
                                "the journal (answers still on their way, or a ledger that cannot be written)\n")
                else:
                    _send(conn, f"0\n{moved}\n")
                return None
            live = self.gate_for(config.get("db"), float(config.get("timeout_s") or 5.0))
            if op not in ("check", "submit"):
                raise ValueError(f"unknown op {op!r}")
            now = naive_utc(config.get("now")) or utcnow()
            try:  # any value in the request is the decision's to refuse by field; only its nesting is not
                request = loads_bounded(config.get("request") or "null")
            except JSONTooDeep as exc:
                decision, seq = _too_deep(exc, now), None  # refused before a decision: nothing journaled
            else:
                decision, seq = live.decide(request, now=now, origin=config.get("origin") or "cli",
                                            write=op == "submit", caller=caller)
        except Exception as exc:
            _send(conn, f"{EXIT_FAILED_REFUSED}\n{type(exc).__name__}: {' '.join(str(exc).split())}\n")
            return None
        sent = _send(conn, "0\n" + json_text(decision) + "\n")
        return (live, seq, sent) if seq is not None else None


def _ledger_key(path: Path):
    """Which ledger a path names: its file's (device, inode), so a hard link or another path to a
    ledger already served reaches the same LiveGate (a second one would be refused its lock); the
    path itself while no file is there."""
    try:
        st = os.stat(path)
    except OSError:
        return path
    return (st.st_dev, st.st_ino)


def _too_deep(exc: JSONTooDeep, now):
    """The reject of a request whose JSON nests too deeply to be parsed (c:request)."""
    return reject({}, [reason("invalid-request", f"the request JSON is {exc}", field="request",
                              fix="send the request as one JSON object whose fields nest at most two levels")],
                  now=now)


def _hook_answer(judged: Judged) -> str:
    return f"{judged.code}\n" + "".join(ln + "\n" for ln in judged.lines())


def _refuse_unreadable(conn, why) -> None:
    _send(conn, f"{EXIT_FAILED_REFUSED}\nMSG training-gate: refused: unreadable message ({why})\n")


def _send(conn, text: str) -> bool:
    """True when the whole answer was handed to the caller's socket. Ends our side of the connection,
    so the caller has its answer at once (the journal's note about it comes after). Any text goes out
    as UTF-8: a lone surrogate (a hostile request's text repeated in a message) as its \\udXXX escape."""
    try:
        conn.sendall(text.encode("utf-8", "backslashreplace"))
    except OSError:
        return False
    try:
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    return True


def serve(socket_path: str, *, db=None, journal_max_mb: float | None = None, journal_sync: str = "FULL",
          flush_interval_s: float = 0.25, windows_interval_s: float | None = DEFAULT_INTERVAL_S,
          queue_interval_s: float | None = QUEUE_INTERVAL_S) -> None:
    """Listen on `socket_path` until SIGTERM/SIGINT. With `db` (or $GATE_DB) that ledger is loaded at
    once, and the server refuses to start when another server holds it. `flush_interval_s`: seconds
    between batches into the ledger; `windows_interval_s`: between reads of the cluster's
    reservations (None or 0: none)."""
    server = GateServer(journal_max_mb=journal_max_mb, journal_sync=journal_sync,
                        flush_interval_s=flush_interval_s, flag_log=os.environ.get("TG_FLAG_LOG") or None,
                        windows_interval_s=windows_interval_s, authority=_authority(),
                        queue_interval_s=queue_interval_s, on_defer=on_defer_setting())
    named = db or os.environ.get("GATE_DB")
    if named:
        try:
            server.gate_for(named)
        except ServerBusy as exc:
            print(f"lib.slurm.server: not starting: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(3) from None
        except (LedgerLocked, JournalError, OSError, sqlite3.Error) as exc:
            # held by another writer, a full disk: may pass, so exit 1 (a supervisor starts it again;
            # the systemd unit's RestartPreventExitStatus=3 keeps exit 3 for what will not pass)
            print(f"lib.slurm.server: not starting yet: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
        except Exception as exc:
            if db:  # named on the command line: the operator wants that ledger served
                print(f"lib.slurm.server: not starting: {exc}", file=sys.stderr, flush=True)
                raise SystemExit(3) from None
            # only $GATE_DB: start anyway, the ledger is loaded at its first job (a failure then is a
            # gate failure for that job, under the failure policy)
            print(f"lib.slurm.server: $GATE_DB not loaded yet: {exc}", file=sys.stderr, flush=True)
    old = os.umask(0o077)  # owner-only from the start: no moment where others could connect
    os.makedirs(os.path.dirname(os.path.abspath(socket_path)), mode=0o700, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    binding = f"{socket_path}.{os.getpid()}"
    try:
        try:
            os.unlink(binding)
        except FileNotFoundError:
            pass
        srv.bind(binding)
    finally:
        os.umask(old)
    os.chmod(binding, 0o600)
    srv.listen(LISTEN_BACKLOG)  # a burst waits in the backlog instead of failing connect() with EAGAIN
    os.replace(binding, socket_path)  # the path appears only once the server listens
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"lib.slurm.server: gate server pid {os.getpid()} listening on {socket_path}", file=sys.stderr,
          flush=True)
    # WORKERS threads each accept and answer in turn: no hand-off between threads on the way (each
    # wake-up costs milliseconds on a busy machine). A caller whose message is not whole after
    # READ_TIMEOUT_S goes to the one slow-reader thread, so slow callers never hold up the workers.
    server.slow.start()
    stop = threading.Event()
    for _ in range(WORKERS):
        threading.Thread(target=_accept_loop, args=(server, srv, stop), daemon=True).start()
    try:
        # short waits: the kernel may hand SIGTERM to another thread, and then the main thread runs
        # the handler only when it wakes (a wait of an hour made the stop wait that long)
        while not stop.wait(0.5):
            pass
    finally:
        stop.set()
        srv.close()
        try:
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
        if server.close():   # decisions stay in a journal (logged): the next start moves them
            raise SystemExit(1)


def _authority():
    """The authority $GATE_AUTHORITY / $GATE_CLUSTER name (lib.authority.settings), checked before the
    server starts: a malformed setting, or a database without the schema or with a newer one, exits 2
    (it will not pass by waiting); one that cannot be reached yet is logged, and decisions follow the
    failure policy until it can."""
    try:
        authority = configured_authority()
        if authority is not None:
            connect(authority.url, cluster=authority.cluster).close()
    except (AuthoritySettingError, AuthoritySchemaError) as exc:
        print(f"lib.slurm.server: not starting: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(OP_INVALID) from None
    except AuthorityUnavailable as exc:
        print(f"lib.slurm.server: {exc}; starting anyway", file=sys.stderr, flush=True)
    if authority is not None:
        print(f"lib.slurm.server: deciding against the authority {authority!r}", file=sys.stderr, flush=True)
    return authority


def _accept_loop(server: GateServer, srv, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except OSError:
            return  # the listening socket was closed: the server is stopping
        try:
            server.handle(conn)
        except Exception as exc:  # a broken client must not stop the server
            print(f"lib.slurm.server: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ clients (the command line, tests)


def main(argv=None) -> int:
    """`python -m lib.slurm.server --socket PATH [--db LEDGER] [--journal-max-mb MB]
    [--journal-sync FULL|NORMAL] [--flush-interval-s S] [--windows-interval-s S]` (also
    `python -m lib.slurm.hook serve ...`)."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def opt(name, default=None):
        return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default
    max_mb = opt("--journal-max-mb")
    serve(opt("--socket", os.environ.get("TG_GATE_SOCKET")), db=opt("--db"),
          journal_max_mb=float(max_mb) if max_mb else None,
          journal_sync=opt("--journal-sync", os.environ.get("TG_GATE_JOURNAL_SYNC") or "FULL").upper(),
          flush_interval_s=float(opt("--flush-interval-s", 0.25)),
          windows_interval_s=float(opt("--windows-interval-s",
                                       os.environ.get("TG_WINDOWS_INTERVAL_S") or DEFAULT_INTERVAL_S)),
          queue_interval_s=float(opt("--queue-interval-s", os.environ.get("TG_QUEUE_INTERVAL_S") or QUEUE_INTERVAL_S)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
