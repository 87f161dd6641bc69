"""The thumbs worker: takes jobs from queue/inbox in order, renders them, moves them to queue/done.

A failing job is retried after ``backoff_s * 2**(attempt-1)`` seconds (capped at 30); after
``max_attempts`` attempts it goes to queue/dead (0: never). The oldest job is always retried
first, so jobs behind a failing one wait. Failures are logged the first time and then every
1,000th. The worker exits on SIGTERM, and on its own once its working folder is deleted.

It answers on 127.0.0.1:STATUS_PORT with one JSON line (its pid and the CPU seconds it has
used), which is how `worker.status` measures it: a health check sees the service, not its
processes. A second worker cannot take the port and exits.
"""

import json
import os
import socket
import sys
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUEUE = ROOT / "queue"
INBOX, DONE, DEAD = QUEUE / "inbox", QUEUE / "done", QUEUE / "dead"
STATUS_PORT = 7461


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


def render(job: dict) -> dict:
    """The thumbnail's geometry: the job's (width, height) scaled to fit 256 px."""
    width, height = job["size"]
    scale = 256 / max(width, height)
    return {"id": job["id"], "thumb": [round(width * scale), round(height * scale)]}


def _exit_with_folder() -> None:
    while ROOT.is_dir():
        time.sleep(0.5)
    os._exit(0)


def _serve_status(server: socket.socket) -> None:
    while True:
        conn, _ = server.accept()
        with conn:
            t = os.times()
            line = {"pid": os.getpid(), "cpu_s": t.user + t.system, "root": str(ROOT)}
            conn.sendall(json.dumps(line).encode() + b"\n")


def main() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("127.0.0.1", STATUS_PORT))
    except OSError as exc:
        log(f"status port {STATUS_PORT} taken ({exc}): another worker runs; exiting")
        sys.exit(1)
    server.listen(8)
    threading.Thread(target=_serve_status, args=(server,), daemon=True).start()
    config = tomllib.loads((ROOT / "worker" / "config.toml").read_text())
    retry, poll_s = config["retry"], config["queue"]["poll_s"]
    for d in (INBOX, DONE, DEAD):
        d.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=_exit_with_folder, daemon=True).start()
    log(
        f"thumbs worker pid {os.getpid()} started: backoff_s={retry['backoff_s']} "
        f"max_attempts={retry['max_attempts']}"
    )
    attempts: dict[str, int] = {}
    failures = 0
    while True:
        jobs = sorted(INBOX.glob("*.json"))
        if not jobs:
            time.sleep(poll_s)
            continue
        path = jobs[0]
        try:
            out = render(json.loads(path.read_text()))
        except (KeyError, TypeError, ValueError) as exc:
            n = attempts[path.name] = attempts.get(path.name, 0) + 1
            failures += 1
            if failures == 1 or failures % 1_000 == 0:
                log(
                    f"{path.name} attempt {n} failed ({failures:,} failures so far): "
                    f"{type(exc).__name__}: {exc}"
                )
            if retry["max_attempts"] and n >= retry["max_attempts"]:
                path.rename(DEAD / path.name)
                log(f"{path.name} moved to queue/dead after {n} attempts")
                continue
            time.sleep(min(retry["backoff_s"] * 2 ** (n - 1), 30))
            continue
        (DONE / path.name).write_text(json.dumps(out))
        path.unlink()


if __name__ == "__main__":
    main()
