import sqlite3

from db.migrate import LIVE, MIGRATIONS, migrate
from ops.slow_query import plan, uses_index


def test_a_database_built_from_the_migrations_serves_the_query_from_an_index(tmp_path):
    db = tmp_path / "fresh.db"
    migrate(db)
    assert uses_index(plan(sqlite3.connect(db)))


def test_the_live_database_has_every_migration_applied():
    con = sqlite3.connect(LIVE)
    applied = {row[0] for row in con.execute("SELECT name FROM schema_migrations")}
    assert applied == {p.name for p in MIGRATIONS.glob("*.sql")}


def test_migrations_are_numbered_without_gaps():
    numbers = [int(p.name[:4]) for p in sorted(MIGRATIONS.glob("*.sql"))]
    assert numbers == list(range(1, len(numbers) + 1))
