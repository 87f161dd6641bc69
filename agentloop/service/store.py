"""The service's run book on disk: one SQLite file (WAL) in the state folder, one row a run.

Every accepted submission is a row before its ``202`` answer: the request as submitted (so a
restart can run it again), its idempotency key and the body's digest, status, times, the
runner's run id and trace path; a status change is written as it happens. SQLite is called
from one thread of the store's own (``sqlite3`` blocks), so the event loop never waits on the
disk and the connection is never shared between threads. ``synchronous=FULL``: a row the
answer promised survives a crash of the process and of the machine. Rows of ended runs are
deleted past an age or a count (:meth:`RunStore.prune`); their trace files are the user's and
stay where they are.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from agentloop.errors import ConfigError

FILE = "runs.sqlite3"
T = TypeVar("T")

# the columns a run's row has besides seq (the order of submission) and the request
FIELDS = (
    "id",
    "task",
    "tier",
    "status",
    "reason",
    "submitted_at",
    "started_at",
    "ended_at",
    "run_id",
    "trace",
    "steps",
    "elapsed_s",
    "success",
    "success_detail",
    "resumed_from",
    "resumed_as",
    "idem_key",
    "idem_digest",
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    request BLOB NOT NULL,
    task TEXT NOT NULL,
    tier TEXT,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    submitted_at TEXT NOT NULL,
    started_at TEXT,
    ended_at TEXT,
    run_id TEXT,
    trace TEXT,
    steps INTEGER NOT NULL DEFAULT 0,
    elapsed_s REAL,
    success INTEGER,
    success_detail TEXT NOT NULL DEFAULT '',
    resumed_from TEXT,
    resumed_as TEXT,
    idem_key TEXT UNIQUE,
    idem_digest TEXT
);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status, seq);
CREATE INDEX IF NOT EXISTS runs_task ON runs (task, seq);
"""


class RunStore:
    """The runs table; every method runs its SQL on the store's one thread."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentloop-store")
        self._db: sqlite3.Connection | None = None

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            assert self._db is not None, "the store is not open"
            return fn(self._db)

        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    async def open(self) -> None:
        """Open (or create) the file; a folder or file that cannot be used is a ConfigError."""

        def connect() -> sqlite3.Connection:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
            return db

        try:
            self._db = await asyncio.get_running_loop().run_in_executor(self._pool, connect)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the run store {self.path}: {exc}") from None

    @property
    def is_open(self) -> bool:
        return self._db is not None

    async def close(self) -> None:
        if self._db is not None:
            await self._call(lambda db: db.close())
            self._db = None
        self._pool.shutdown(wait=True)

    async def add(self, row: dict[str, Any], request: Any) -> None:
        """Insert a run's row (``row``: some of :data:`FIELDS`) with its request, committed."""
        cols = ["request", *row]
        sql = f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        values = [orjson.dumps(request), *row.values()]
        await self._call(lambda db: db.execute(sql, values))

    async def update(self, key: str, /, **fields: Any) -> None:
        """Set ``fields`` (of :data:`FIELDS`) of the run with id ``key``, committed."""
        assert set(fields) <= set(FIELDS), set(fields) - set(FIELDS)
        sql = f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?"
        values = [*fields.values(), key]
        await self._call(lambda db: db.execute(sql, values))

    async def get(self, run_id: str) -> dict[str, Any] | None:
        rows = await self._select("WHERE id = ?", [run_id])
        return rows[0] if rows else None

    async def by_key(self, key: str) -> dict[str, Any] | None:
        rows = await self._select("WHERE idem_key = ?", [key])
        return rows[0] if rows else None

    async def with_status(self, *statuses: str) -> list[dict[str, Any]]:
        """Rows with one of ``statuses``, oldest first (the order they were submitted in)."""
        marks = ", ".join("?" * len(statuses))
        return await self._select(f"WHERE status IN ({marks}) ORDER BY seq", list(statuses))

    async def page(
        self, *, status: str | None, task: str | None, before: int | None, limit: int
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` rows, newest first, older than seq ``before``; and the cursor of the
        next page (the last row's seq), None when there is none."""
        where: list[str] = []
        args: list[Any] = []
        for col, value in (("status", status), ("task", task)):
            if value is not None:
                where.append(f"{col} = ?")
                args.append(value)
        if before is not None:
            where.append("seq < ?")
            args.append(before)
        sql = ("WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq DESC LIMIT ?"
        rows = await self._select(sql, [*args, limit + 1])
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (int(rows[-1]["seq"]) if more and rows else None)

    async def prune(
        self, *, ended_before: str, keep: int, live: tuple[str, ...]
    ) -> list[tuple[str, str]]:
        """Delete the rows of runs that have ended (a status not in ``live``) and ended before
        ``ended_before`` (ISO time) or are not among the newest ``keep`` ended ones, in one
        transaction; (id, status) of each row deleted. Trace files are not touched."""
        marks = ", ".join("?" * len(live))
        ended = f"status NOT IN ({marks})"
        sql = (
            f"SELECT seq, id, status FROM runs WHERE {ended} AND "
            "(COALESCE(ended_at, submitted_at) < ? OR seq NOT IN "
            f"(SELECT seq FROM runs WHERE {ended} ORDER BY seq DESC LIMIT ?))"
        )

        def run(db: sqlite3.Connection) -> list[tuple[str, str]]:
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(sql, [*live, ended_before, *live, keep]).fetchall()
                db.executemany("DELETE FROM runs WHERE seq = ?", [(r[0],) for r in rows])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return [(str(r[1]), str(r[2])) for r in rows]

        return await self._call(run)

    async def counts(self) -> dict[str, int]:
        """How many runs have each status."""
        rows = await self._call(
            lambda db: db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall()
        )
        return {str(r[0]): int(r[1]) for r in rows}

    async def _select(self, tail: str, args: list[Any]) -> list[dict[str, Any]]:
        sql = f"SELECT seq, request, {', '.join(FIELDS)} FROM runs {tail}"
        rows = await self._call(lambda db: db.execute(sql, args).fetchall())
        out = []
        for r in rows:
            row = dict(r)
            row["request"] = orjson.loads(row["request"])
            if row["success"] is not None:
                row["success"] = bool(row["success"])
            out.append(row)
        return out
