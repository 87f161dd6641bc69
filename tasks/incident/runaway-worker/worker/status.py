"""The thumbs worker's health: queue depths, the worker's CPU use over one second, its config.

`python -m worker.status [--wait S]` waits up to S seconds for the inbox to drain first. Exit 0
and `WORKER HEALTHY` when a worker of this folder answers on its status port, idles below 20% of
a core with an empty inbox, and retries are bounded (1-10 attempts, a backoff of at least 0.1 s).
The worker is measured through its status port (its own CPU seconds), not /proc: the check runs
where the worker's processes are not visible, and only the network is shared.
"""

import json
import socket
import sys
import time
import tomllib
from pathlib import Path

from worker.main import STATUS_PORT

ROOT = Path(__file__).resolve().parent.parent
INBOX, DONE, DEAD = (ROOT / "queue" / d for d in ("inbox", "done", "dead"))


def ask() -> dict | None:
    """The worker's status line (pid, CPU seconds used, folder), or None when none answers."""
    try:
        with socket.create_connection(("127.0.0.1", STATUS_PORT), timeout=2) as conn:
            return json.loads(conn.makefile().readline())
    except (OSError, ValueError):
        return None


def workers() -> list[int]:
    """Pids of thumbs workers started from this folder (at most one can hold the port)."""
    status = ask()
    return [status["pid"]] if status and status.get("root") == str(ROOT) else []


def cpu_share(pid: int, seconds: float = 1.0) -> float:
    """Share of one core the worker used over ``seconds``, from its own CPU seconds."""
    first = ask()
    time.sleep(seconds)
    second = ask()
    if not first or not second or first["pid"] != pid or second["pid"] != pid:
        return float("inf")
    return (second["cpu_s"] - first["cpu_s"]) / seconds


def count(d: Path) -> int:
    return len(list(d.glob("*.json"))) if d.is_dir() else 0


def main() -> int:
    wait = float(sys.argv[sys.argv.index("--wait") + 1]) if "--wait" in sys.argv else 0.0
    deadline = time.monotonic() + wait
    while count(INBOX) and time.monotonic() < deadline:
        time.sleep(0.2)
    retry = tomllib.loads((ROOT / "worker" / "config.toml").read_text())["retry"]
    pids = workers()
    print(
        f"queue: inbox {count(INBOX)}, done {count(DONE)}, dead {count(DEAD)}"
        + (f" ({', '.join(sorted(p.name for p in DEAD.glob('*.json')))})" if count(DEAD) else "")
    )
    print(f"retry: backoff_s={retry['backoff_s']} max_attempts={retry['max_attempts']}")
    problems = []
    if len(pids) != 1:
        problems.append(f"{len(pids)} workers running (need exactly 1)")
    else:
        share = cpu_share(pids[0])
        print(f"worker pid {pids[0]}: {share:.0%} of a core")
        if share > 0.2:
            problems.append(f"the worker uses {share:.0%} of a core")
    if count(INBOX):
        problems.append(f"{count(INBOX)} jobs still waiting in the inbox")
    if not (1 <= retry["max_attempts"] <= 10 and retry["backoff_s"] >= 0.1):
        problems.append("retries are unbounded (need 1-10 attempts and backoff_s >= 0.1)")
    if problems:
        print("WORKER UNHEALTHY: " + "; ".join(problems))
        return 1
    print("WORKER HEALTHY: inbox drained, retries bounded, worker idle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
