"""Reading callers' messages for the warm gate server (lib.slurm.server), so that a slow caller never
holds up a real job.

The fast path: the worker thread that accepted a connection reads it for at most READ_TIMEOUT_S
(`read_bounded`); a caller that sends its whole message at once, as the hook does, is answered on that
same thread (no hand-off between threads: each wake-up costs milliseconds on a busy machine).

The slow path: a message not complete by then goes to the one `SlowReader` thread, a selector over
at most MAX_SLOW connections. It reads each as its bytes come, hands a whole message to a new thread
to answer, refuses one not complete within MESSAGE_DEADLINE_S of its accept (however its bytes
trickle) or larger than MAX_MESSAGE, and drains what a refused caller still sends. An idle or
trickling caller thus costs a worker READ_TIMEOUT_S once, and the slow reader a few microseconds
per byte it sends.
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import sys
import threading
import time
from typing import Callable

MAX_MESSAGE = 4 << 20      # bytes; a job description with its comment is a few kB, a hostile one may hold
                           # megabyte strings: those are the request validation's to refuse, by field
READ_TIMEOUT_S = 0.02      # the fast path's wait for a whole message; then the slow reader takes it
MESSAGE_DEADLINE_S = 3.0   # a whole message, from its accept; then it is refused
MAX_SLOW = 512             # connections the slow reader holds at once; a slow caller beyond is refused
DRAIN_S = 2.0              # after a refusal, what the caller still sends is read and dropped this long


class Message:
    """One caller's message as it arrives: its bytes, the caller (uid, pid from SO_PEERCRED), when it
    was accepted (perf_counter, for timing) and by when it must be complete (monotonic)."""

    __slots__ = ("chunks", "size", "caller", "t0", "deadline", "slow")

    def __init__(self, conn: socket.socket):
        self.t0, self.deadline = time.perf_counter(), time.monotonic() + MESSAGE_DEADLINE_S
        self.chunks, self.size, self.slow = [], 0, False
        try:
            pid, uid, _gid = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        except OSError:
            pid = uid = None
        self.caller = (uid, pid)

    def feed(self, b: bytes) -> bool:
        """Add what recv gave: True at the end of the message (the caller's EOF); ValueError when it
        grows past MAX_MESSAGE."""
        if not b:
            return True
        self.size += len(b)
        if self.size > MAX_MESSAGE:
            raise ValueError(f"message larger than {MAX_MESSAGE} bytes")
        self.chunks.append(b)
        return False

    def data(self) -> bytes:
        return b"".join(self.chunks)


def read_bounded(conn: socket.socket, msg: Message, wait_s: float = READ_TIMEOUT_S) -> bool:
    """Read into `msg` for at most `wait_s` seconds in all: True once the caller ended its message."""
    end = time.monotonic() + wait_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        conn.settimeout(left)
        try:
            b = conn.recv(65536)
        except TimeoutError:
            return False
        if msg.feed(b):
            return True


class _Held:
    __slots__ = ("conn", "msg", "until")

    def __init__(self, conn, msg, until):
        self.conn, self.msg, self.until = conn, msg, until


class SlowReader:
    """See the module docstring. `answer(conn, msg)` runs on a new thread for each whole message;
    `refuse(conn, why)` sends a refusal and ends the server's side (the caller then reads it)."""

    def __init__(self, answer: Callable, refuse: Callable):
        self.answer, self.refuse = answer, refuse
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._mu = threading.Lock()
        self._new: list[tuple[socket.socket, Message | None]] = []
        self.held = 0  # connections taken and not let go yet

    def start(self) -> SlowReader:
        threading.Thread(target=self._run, name="gate-slow-reader", daemon=True).start()
        return self

    def add(self, conn: socket.socket, msg: Message | None) -> None:
        """Take `conn` from a worker: finish reading `msg`, or (None) drain a caller already refused."""
        with self._mu:
            full = self.held >= MAX_SLOW
            if not full:
                self.held += 1
                self._new.append((conn, msg))
        if full:
            if msg is not None:
                self.refuse(conn, f"the gate server holds {MAX_SLOW} slow connections already; send the "
                                  "whole message at once")
            conn.close()
            return
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # a wake-up is pending already

    def _run(self) -> None:
        while True:
            try:
                self._turn()
            except Exception as exc:  # never let one connection stop the reader
                print(f"lib.slurm.server: slow reader: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def _turn(self) -> None:
        now = time.monotonic()
        soonest = min((k.data.until for k in list(self.sel.get_map().values()) if k.data is not None),
                      default=now + 3600)
        for key, _ in self.sel.select(max(soonest - now, 0)):
            if key.data is None:
                self._take_new()
            elif key.fileobj in self.sel.get_map():
                self._read(key.data)
        now = time.monotonic()
        for key in list(self.sel.get_map().values()):
            h = key.data
            if h is not None and h.until <= now:
                if h.msg is None:
                    self._let_go(h)
                else:
                    self._refuse(h, f"not complete within {MESSAGE_DEADLINE_S:g} s")

    def _take_new(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._mu:
            new, self._new = self._new, []
        for conn, msg in new:
            conn.setblocking(False)
            if msg is not None:
                msg.slow = True
            until = msg.deadline if msg is not None else time.monotonic() + DRAIN_S
            self.sel.register(conn, selectors.EVENT_READ, _Held(conn, msg, until))

    def _read(self, h: _Held) -> None:
        try:
            b = h.conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:  # reset: the caller is gone
            self._let_go(h)
            return
        if h.msg is None:  # draining a refused caller
            if not b:
                self._let_go(h)
            return
        try:
            complete = h.msg.feed(b)
        except ValueError as exc:
            self._refuse(h, exc)
            return
        if complete:
            self._let_go(h, close=False)
            h.conn.setblocking(True)
            threading.Thread(target=self._answer, args=(h.conn, h.msg), daemon=True).start()

    def _answer(self, conn: socket.socket, msg: Message) -> None:
        try:
            self.answer(conn, msg)
        except Exception as exc:  # a broken client must not stop the server
            print(f"lib.slurm.server: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def _refuse(self, h: _Held, why) -> None:
        self.refuse(h.conn, why)
        h.msg, h.until = None, time.monotonic() + DRAIN_S  # then drain it

    def _let_go(self, h: _Held, close: bool = True) -> None:
        self.sel.unregister(h.conn)
        with self._mu:
            self.held -= 1
        if close:
            h.conn.close()
