"""The gate server's wire format and its client: what the hook (`python -S`), the command line and the
tests send to the warm gate server (lib.slurm.server) over its Unix socket, and read back.

Request: NUL-separated "f:<job field>", value, ..., "c:<setting>", value, ... (C strings hold no
NUL), then the client ends its side of the connection (EOF ends the message). The job fields are
JOB_FIELDS (job_submit.lua sends them in that order; so does the hook on its command line).
Answer: "<exit code>\\n" then the rest (the hook's protocol lines, or for op requests the decision JSON
or an error line). A job's exit codes (the hook's too): EXIT_ACCEPTED, EXIT_REFUSED (by the gate),
EXIT_FAILED_REFUSED, EXIT_FAILED_ACCEPTED (the gate could not judge it: the failure policy's answer),
EXIT_HELD (deferred, accepted with an admin hold until the gate admits it).

Cheap to import: only _socket and time (json, socket.py, enum and selectors would cost more than
the rest of the hook's start); Lua's own client (job_submit.lua) speaks the same format.
"""
from __future__ import annotations

import _socket  # the C module: socket.py would import enum and selectors
import time

EXIT_ACCEPTED, EXIT_REFUSED, EXIT_FAILED_REFUSED, EXIT_FAILED_ACCEPTED = 0, 1, 3, 4
EXIT_HELD = 5   # accepted held (an admin hold) until the gate admits it: lib.slurm.holds
JOB_FIELDS = ("account", "partition", "time_limit", "name", "comment", "user", "uid", "work_dir",
          "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "num_tasks",
          "min_nodes", "array")
CONNECT_RETRY_S = (0.002, 0.05)  # sleep between connect attempts while the listen backlog is full


def encode_request(fields: dict, config: dict) -> bytes:
    parts = []
    for prefix, d in (("f:", fields), ("c:", config)):
        for k, v in d.items():
            if v is not None:
                parts += [prefix + k, str(v)]
    text = "\0".join(parts)
    try:
        return text.encode("utf-8", "surrogateescape")  # bytes Python read as surrogates go out as they came
    except UnicodeEncodeError:  # another lone surrogate (e.g. a request's "\\ud800"): as that escape,
        return text.encode("utf-8", "backslashreplace")  # which a JSON string reads back as the same text


def decode_request(data: bytes) -> tuple[dict, dict]:
    """(job fields, settings) as text; the server checks the settings (lib.slurm.settings)."""
    parts = data.decode("utf-8", "surrogateescape").split("\0") if data else []
    fields, config = {}, {}
    for k, v in zip(parts[0::2], parts[1::2]):
        if k.startswith("f:"):
            fields[k[2:]] = v
        elif k.startswith("c:"):
            config[k[2:]] = v
    return fields, config


def _recv_all(sock, deadline: float) -> bytes:
    chunks = []
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        b = sock.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def exchange(socket_path: str, fields: dict, config: dict, timeout_s: float) -> tuple[int, str] | None:
    """(exit code, the rest of the answer) for one request to the warm server, or None when no
    server listens there. A timeout or a broken answer raises (the caller's gate failure).

    `timeout_s` bounds the whole exchange. A full listen backlog (EAGAIN on connect: the server is
    busy with a burst) is tried again every few ms within it, then raises BlockingIOError."""
    deadline = time.monotonic() + timeout_s
    pause, most = CONNECT_RETRY_S
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        while True:
            s.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                s.connect(socket_path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                return None
            except BlockingIOError:  # the backlog is full: not a gate failure yet
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, most)
        s.sendall(encode_request(fields, config))
        s.shutdown(_socket.SHUT_WR)
        text = _recv_all(s, deadline).decode("utf-8", "replace")
    finally:
        s.close()
    head, _, rest = text.partition("\n")
    return int(head), rest


def ask(socket_path: str, config: dict, timeout_s: float = 30.0) -> tuple[int, str] | None:
    """(exit code, rest of the answer) of an op request (check, submit, flush: the command line,
    tests), or None when no server listens there."""
    got = exchange(socket_path, {}, config, timeout_s)
    return None if got is None else (got[0], got[1].strip())


def flush(socket_path: str, db: str) -> int | None:
    """Ask the server to move its journal into the ledger `db` now (an absolute path); the
    decisions moved, None without a server."""
    got = ask(socket_path, {"op": "flush", "db": db})
    if got is None:
        return None
    code, rest = got
    if code != 0:
        raise RuntimeError(f"gate server could not flush {db}: {rest}")
    return int(rest)
