"""A webhook receiver in a process of its own, for the alert delivery tests:
`python -m tests.fixtures_webhook PORT LOG DELAY_S` listens on 127.0.0.1:PORT and, for each POST,
appends one JSON line to LOG ({"header": Idempotency-Key, "body": the body's idempotency_key, "id"}),
waits DELAY_S seconds, then answers 200. `WebhookProcess` starts and stops one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class WebhookProcess:
    """A receiver process on `port` logging to `log`; `received()` lists what it got, in order."""

    def __init__(self, port: int, log: Path, delay_s: float = 0.0):
        self.port, self.log = port, Path(log)
        self.url = f"http://127.0.0.1:{port}/hook"
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fixtures_webhook", str(port), str(log),
                                      str(delay_s)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                     stderr=subprocess.PIPE, text=True)
        ready = Path(f"{log}.ready")
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"receiver did not start: {self.stop()}")
            time.sleep(0.02)
        ready.unlink()

    def received(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(ln) for ln in self.log.read_text(encoding="utf-8").splitlines() if ln.strip()]

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.communicate(timeout=30)[1] or ""
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate(timeout=30)[1] or ""


def main(argv: list[str]) -> None:
    port, log, delay_s = int(argv[0]), Path(argv[1]), float(argv[2])
    mu = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with mu, log.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"header": self.headers.get("Idempotency-Key"),
                                    "body": body.get("idempotency_key"), "id": body.get("id")}) + "\n")
            time.sleep(delay_s)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    Path(f"{log}.ready").touch()
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
