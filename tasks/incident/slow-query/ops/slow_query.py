"""The order history query: its plan, and its p95 latency over 40 customers; exit 1 when slow.

The verdict needs both: a plan that reads orders through an index, and p95 within budget.
"""

import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = ("SELECT id, created_at, total_cents, status FROM orders WHERE customer_id = ? "
         "ORDER BY created_at DESC LIMIT 20")
BUDGET_MS = 5.0


def plan(con: sqlite3.Connection) -> list[str]:
    """EXPLAIN QUERY PLAN of the query, one line per step."""
    return [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + QUERY, (1,))]


def p95_ms(con: sqlite3.Connection, n: int = 40) -> float:
    rng = random.Random(7)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        con.execute(QUERY, (rng.randrange(1, 10_001),)).fetchall()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.quantiles(times, n=20)[18]


def uses_index(steps: list[str]) -> bool:
    return any(s.startswith("SEARCH orders USING") and "INDEX" in s for s in steps) and \
        not any(s.startswith("SCAN orders") or "TEMP B-TREE" in s for s in steps)


def main() -> int:
    con = sqlite3.connect(f"file:{ROOT / 'db' / 'shop.db'}?mode=ro", uri=True)
    steps = plan(con)
    p95 = p95_ms(con)
    print("plan: " + " | ".join(steps))
    print(f"p95: {p95:.2f} ms over 40 customers (budget {BUDGET_MS:g} ms)")
    if uses_index(steps) and p95 <= BUDGET_MS:
        print(f"QUERY OK: index plan, p95 {p95:.2f} ms")
        return 0
    print(f"QUERY SLOW: {'full table scan' if not uses_index(steps) else 'over budget'}, "
          f"p95 {p95:.2f} ms")
    return 1


if __name__ == "__main__":
    sys.exit(main())
