"""Fill the live database with a deterministic sample: 100,000 orders of 10,000 customers."""

import random
import sqlite3
import sys
from datetime import datetime, timedelta

from db.migrate import LIVE

ORDERS, CUSTOMERS = 100_000, 10_000


def main() -> int:
    rng = random.Random(2291)
    start = datetime(2025, 1, 1)
    rows = ((i, rng.randrange(1, CUSTOMERS + 1),
             (start + timedelta(minutes=rng.randrange(0, 480_000))).isoformat(timespec="seconds"),
             rng.randrange(500, 40_000)) for i in range(1, ORDERS + 1))
    con = sqlite3.connect(LIVE)
    with con:
        con.executemany("INSERT INTO orders (id, customer_id, created_at, total_cents) "
                        "VALUES (?, ?, ?, ?)", rows)
    con.close()
    print(f"seeded {ORDERS:,} orders of {CUSTOMERS:,} customers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
