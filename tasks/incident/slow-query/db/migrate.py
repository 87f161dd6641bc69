"""Apply db/migrations/*.sql in order, each once, recording them in schema_migrations.

`python -m db.migrate [--db PATH] [--to NNNN]`: the live database is db/shop.db.
"""

import argparse
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "db" / "migrations"
LIVE = ROOT / "db" / "shop.db"


def migrate(db: Path, upto: str | None = None) -> list[str]:
    """Apply every pending migration (up to ``upto`` included); the names applied."""
    con = sqlite3.connect(db)
    try:
        con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, "
                    "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
        done = {row[0] for row in con.execute("SELECT name FROM schema_migrations")}
        applied = []
        for path in sorted(MIGRATIONS.glob("*.sql")):
            if upto is not None and path.name[:4] > upto:
                break
            if path.name in done:
                continue
            con.executescript("BEGIN;\n" + path.read_text() + "\nCOMMIT;")
            con.execute("INSERT INTO schema_migrations (name) VALUES (?)", (path.name,))
            con.commit()
            applied.append(path.name)
        return applied
    finally:
        con.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=LIVE)
    ap.add_argument("--to", default=None)
    args = ap.parse_args()
    applied = migrate(args.db, args.to)
    print(f"{args.db.name}: applied {', '.join(applied) if applied else 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
