"""The one process runner: every task command (setup, tools, success check) runs through :func:`run`.

A command is ``bash -c COMMAND`` started in the run's :class:`~agentloop.sandbox.jail.Jail` in its own
session, with its timeout; a timeout or the cancellation of the awaiting task kills it and every
process it started (the jail tells them apart). Two ways to collect output:

- ``background="kill"`` (the ``run`` / ``run_tests`` tools): pipes, read as they fill (head and
  tail kept, the total counted). Background processes that still hold the pipes ``LINGER_S``
  after bash exits are killed; ones that redirected their output keep running until the run
  ends (``Outcome.still_running``).
- ``background="keep"`` (setup commands, the success check): output goes to a temporary file,
  so a service a setup command starts with ``&`` cannot hold the call open, and lives on for
  the rest of the run, reachable on the jail's 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentloop.redact import cut_middle
from agentloop.sandbox.jail import Command, Jail

LINGER_S = 0.5  # after bash exits, how long background holders of its pipes may keep writing
TIMEOUT_EXIT = 124  # as coreutils' timeout reports one


class Capture:
    """One output stream: its first and last ``limit`` bytes, and how many bytes came in all."""

    def __init__(self, limit: int) -> None:
        self.limit, self.total = limit, 0
        self.head, self.tail = bytearray(), bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.limit:
                del self.tail[: len(self.tail) - self.limit]

    @property
    def complete(self) -> bool:
        return self.total == len(self.head) + len(self.tail)

    def text(self) -> str:
        """Everything kept (the whole stream when ``complete``)."""
        return (self.head + self.tail).decode("utf-8", "replace")

    def render(self, budget: int, name: str, cap: int) -> str:
        """The stream in at most ~``budget`` chars, head and tail, saying what was cut."""
        if self.complete:
            text = self.text()
            if len(text) <= budget:
                return text
            head_t, tail_t = text, text
        else:
            head_t = self.head.decode("utf-8", "replace")
            tail_t = self.tail.decode("utf-8", "replace")
        keep_head = int(budget * 0.4)
        keep_tail = budget - keep_head
        shown = head_t[:keep_head] + (tail_t[-keep_tail:] if keep_tail else "")
        cut = max(0, self.total - len(shown.encode("utf-8", "replace")))
        return cut_middle(
            head_t[:keep_head],
            tail_t[-keep_tail:] if keep_tail else "",
            f"about {cut:,} bytes cut from the middle of {name} ({self.total:,} bytes in all); "
            f"output capped at {cap:,} chars",
        )


@dataclass(frozen=True)
class Outcome:
    """What one command did: exit code, captured streams, and how it ended."""

    exit_code: int
    stdout: Capture
    stderr: Capture
    timed_out: bool
    timeout_s: float
    duration_s: float
    killed_lingering: bool  # background processes held the pipes and were killed
    still_running: bool  # background processes (output redirected) outlive the command
    process_limit_hits: int = 0  # forks the jail's process ceiling refused meanwhile


class _Reader(asyncio.Protocol):
    def __init__(self, capture: Capture, closed: asyncio.Future[None]) -> None:
        self.capture, self.closed = capture, closed

    def data_received(self, data: bytes) -> None:
        self.capture.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _stop(cmd: Command) -> None:
    """Kill ``cmd`` even while the caller is being cancelled."""
    with contextlib.suppress(Exception):
        await asyncio.shield(cmd.kill())


async def run(
    jail: Jail,
    command: str,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    cap: int,
    background: Literal["kill", "keep"] = "kill",
) -> Outcome:
    """Run ``bash -c command`` in ``jail``; kill it and its processes on timeout or cancel."""
    if background == "keep":
        return await _run_to_files(jail, command, cwd, env, timeout_s, cap)
    loop = asyncio.get_running_loop()
    out, err = Capture(cap), Capture(cap)
    closed = [loop.create_future(), loop.create_future()]
    transports: list[asyncio.ReadTransport] = []
    started = time.perf_counter()
    hits = jail.process_limit_hits()
    cmd, reads = await _spawn_piped(jail, command, cwd, env)
    lingering = False
    try:
        await _read_into(reads, (out, err), closed, transports)
        code, timed_out = await _exit_within(cmd, timeout_s)
        done, _ = await asyncio.wait(closed, timeout=LINGER_S)
        if len(done) < 2:  # background processes still hold the pipes
            lingering = True
            await cmd.kill()
            await asyncio.wait(closed, timeout=2.0)
        alive = await cmd.alive()
    except BaseException:  # cancelled (or worse): nothing of the command may outlive us
        await _stop(cmd)
        raise
    finally:
        for t in transports:
            t.close()  # a holder that escaped the kill must not keep our pipes open
    return Outcome(
        exit_code=code,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
        timeout_s=timeout_s,
        duration_s=time.perf_counter() - started,
        killed_lingering=lingering,
        still_running=alive,
        process_limit_hits=_limit_hits(jail, hits, err),
    )


async def _spawn_piped(
    jail: Jail, command: str, cwd: Path, env: dict[str, str]
) -> tuple[Command, list[int]]:
    """Start ``bash -c command``, stdin from /dev/null, stdout and stderr into two new pipes;
    the command and the pipes' read ends (ours; the write ends are closed here)."""
    pipes = [os.pipe(), os.pipe()]
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        cmd = await jail.spawn(["bash", "-c", command], cwd, env, (null, pipes[0][1], pipes[1][1]))
    except BaseException:
        for r, _w in pipes:
            os.close(r)
        raise
    finally:  # the child has its copies: ours would leak one descriptor per command
        os.close(null)
        for _r, w in pipes:
            os.close(w)
    return cmd, [r for r, _w in pipes]


async def _read_into(
    reads: list[int],
    captures: tuple[Capture, Capture],
    closed: list[asyncio.Future[None]],
    transports: list[asyncio.ReadTransport],
) -> None:
    """Feed each pipe into its capture as it fills; its future is set when the pipe closes.
    Each transport is added to ``transports`` as it is made (the caller closes them)."""
    loop = asyncio.get_running_loop()
    for r, capture, fut in zip(reads, captures, closed, strict=True):
        reader = _Reader(capture, fut)
        t, _ = await loop.connect_read_pipe(
            lambda reader=reader: reader,  # type: ignore[misc]
            os.fdopen(r, "rb", 0),
        )
        transports.append(t)


async def _exit_within(cmd: Command, timeout_s: float) -> tuple[int, bool]:
    """The command's exit code, killing it (and its processes) at ``timeout_s``; whether it
    timed out."""
    try:
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(cmd.exited), False
    except TimeoutError:
        await cmd.kill()
        return await cmd.exited, True


async def _run_to_files(
    jail: Jail, command: str, cwd: Path, env: dict[str, str], timeout_s: float, cap: int
) -> Outcome:
    out, err = Capture(cap), Capture(cap)
    started = time.perf_counter()
    hits = jail.process_limit_hits()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            cmd = await jail.spawn(
                ["bash", "-c", command], cwd, env, (null, fo.fileno(), fe.fileno())
            )
        finally:
            os.close(null)
        timed_out = False
        try:
            async with asyncio.timeout(timeout_s):
                code = await asyncio.shield(cmd.exited)
        except TimeoutError:
            timed_out = True
            await cmd.kill()
            code = await cmd.exited
        except BaseException:
            await _stop(cmd)
            raise
        alive = await cmd.alive()
        for fh, capture in ((fo, out), (fe, err)):
            await asyncio.to_thread(_read_capped, fh, capture)
    return Outcome(
        exit_code=TIMEOUT_EXIT if timed_out else code,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
        timeout_s=timeout_s,
        duration_s=time.perf_counter() - started,
        killed_lingering=False,
        still_running=alive,
        process_limit_hits=_limit_hits(jail, hits, err),
    )


def _limit_hits(jail: Jail, before: int, err: Capture) -> int:
    """Forks the jail's process ceiling refused during a command (at least 1 if it saw any)."""
    hits = jail.process_limit_hits() - before
    return hits if hits or not jail.refused_forks_in(err.text()) else 1


def _read_capped(fh: object, capture: Capture) -> None:
    """Feed a capture from an output file: its head, and its tail (a server may keep writing)."""
    fd = fh.fileno()  # type: ignore[attr-defined]
    size = os.fstat(fd).st_size
    capture.feed(os.pread(fd, capture.limit, 0))
    if size > capture.limit:
        start = max(capture.limit, size - capture.limit)
        capture.total = start  # what lies between head and tail is counted, not kept
        capture.feed(os.pread(fd, size - start, start))


@dataclass(frozen=True)
class Piped:
    """A long-lived process of the run (an MCP server over stdio): its three pipe ends (ours)."""

    command: Command
    stdin: int  # write end
    stdout: int  # read end
    stderr: int  # read end


async def start_piped(jail: Jail, argv: list[str], *, cwd: Path, env: dict[str, str]) -> Piped:
    """Start ``argv`` (no shell) in ``jail`` with three pipes, for as long as the caller keeps
    it: the caller kills it (``command.kill()``); the jail's close kills it in any case."""
    pipes = [os.pipe(), os.pipe(), os.pipe()]
    theirs = (pipes[0][0], pipes[1][1], pipes[2][1])
    ours = (pipes[0][1], pipes[1][0], pipes[2][0])
    try:
        cmd = await jail.spawn(argv, cwd, env, theirs)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:  # the child has its copies
        for fd in theirs:
            os.close(fd)
    return Piped(cmd, *ours)


def combined(o: Outcome) -> str:
    """stdout then stderr as one text (setup failures, the success check's record)."""
    return o.stdout.text() + o.stderr.text()
