"""A deadline on the round trips of one authority connection, whatever PostgreSQL does.

libpq's own bounds do not cover every fault: `statement_timeout` is enforced by the server (a server
that is stopped, SIGSTOP or a hung host, never cancels anything), and keepalives and
`tcp_user_timeout` act only on a TCP connection whose peer stops acknowledging (a stopped process's
kernel still acknowledges). So a `Watchdog` thread ends the wait itself: when a call overruns its
deadline, it shuts the connection's socket down, and the waiting psycopg call fails at once with a
broken connection (psycopg.OperationalError), which the caller treats as the authority being away.
The connection is then closed and a new one is opened on next use.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager


class Watchdog:
    """One thread that cuts the socket of `current()` (a psycopg connection or None) once an armed
    deadline passes. `bounded(seconds)` arms it around a block; `fired` says whether it cut."""

    def __init__(self, current):
        self.current = current
        self._cv = threading.Condition()
        self._deadline: float | None = None   # time.monotonic() when to cut; None: disarmed
        self.fired = False
        self._thread: threading.Thread | None = None

    @contextmanager
    def bounded(self, seconds: float):
        """The block's authority round trips cut once `seconds` have passed (see the module docstring)."""
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="authority-watchdog", daemon=True)
                self._thread.start()
            self.fired = False
            self._deadline = time.monotonic() + seconds
            self._cv.notify()
        try:
            yield self
        finally:
            with self._cv:
                self._deadline = None

    def _run(self) -> None:
        with self._cv:
            while True:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._deadline = None
                self.fired = True
                cut(self.current())


def cut(con) -> None:
    """Shut down the socket of psycopg connection `con` (both ways): a call waiting on it fails at once."""
    if con is None or con.closed:
        return
    try:
        fd = con.pgconn.socket
    except Exception:  # no socket (closed meanwhile): nothing waits on it
        return
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
