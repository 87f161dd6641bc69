"""Shell tools: run a command, run the task's tests; real subprocesses in their own process group.

Every command runs as ``bash -c`` in the workspace with the scrubbed environment, in a new session
(so its process group holds it and everything it starts). A timeout, or cancellation of the
awaiting task, SIGKILLs the whole group and reaps it. Background processes that keep the output
pipes open are killed when the command ends; ones that redirect their output may keep running
(a server for the browser, say) until the run ends, when the group is killed.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import time
from dataclasses import dataclass

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult
from agentloop_tools._sandbox import (
    MARK_VAR,
    output_cap,
    process_jail,
    subprocess_env,
    tool_timeout,
    workspace,
)

LINGER_S = 0.5  # after bash exits, how long background holders of its pipes may keep writing


class _Capture:
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
                del self.tail[:len(self.tail) - self.limit]

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
        return (head_t[:keep_head]
                + f"\n[... about {cut:,} bytes cut from the middle of {name} ({self.total:,} "
                  f"bytes in all); output capped at {cap:,} chars ...]\n"
                + (tail_t[-keep_tail:] if keep_tail else ""))


class _Protocol(asyncio.SubprocessProtocol):
    """Feeds the two captures; tells apart "bash exited" from "every pipe holder is gone".

    (In Python 3.11 ``Process.wait()`` waits for the pipes too, so a background child holding
    them would hide the command's own exit.)
    """

    def __init__(self, out: _Capture, err: _Capture) -> None:
        loop = asyncio.get_running_loop()
        self.captures = {1: out, 2: err}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.captures[fd].feed(data if isinstance(data, bytes) else data.encode())

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass(frozen=True)
class Outcome:
    """What one command did: exit code, captured streams, and how it ended."""

    exit_code: int
    stdout: _Capture
    stderr: _Capture
    timed_out: bool
    timeout_s: float
    duration_s: float
    killed_lingering: bool  # background processes held the pipes and were killed
    still_running: bool  # background processes (output redirected) outlive the command


def _effective_timeout(ctx: ToolContext, requested: float | None) -> float:
    ceiling = tool_timeout(ctx)
    if requested is not None and requested <= 0:
        raise ToolError(f"timeout_s must be positive, got {requested:g}")
    if requested is not None and requested < ceiling:
        return requested
    # a little under the runner's own ceiling, so this tool's clean kill wins the race
    return max(ceiling - 0.5, ceiling * 0.9)


async def execute(ctx: ToolContext, command: str, timeout_s: float) -> Outcome:
    """Run ``bash -c command`` in the workspace; kill its process group on timeout or cancel."""
    cap = output_cap(ctx)
    jail = await process_jail(ctx)
    mark = jail.new_mark()
    out, err = _Capture(cap), _Capture(cap)
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    transport, proto = await loop.subprocess_exec(
        lambda: _Protocol(out, err), "bash", "-c", command, cwd=workspace(ctx),
        env={**subprocess_env(ctx), MARK_VAR: mark}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    pgid = transport.get_pid()  # a new session: its leader's pid is the group id
    jail.live[pgid] = mark
    timed_out = lingering = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(proto.exited)
        except TimeoutError:
            timed_out = True
            jail.kill(pgid, mark, leader_alive=not proto.exited.done())
            await proto.exited
        done, _ = await asyncio.wait([proto.closed], timeout=LINGER_S)
        if not done:  # background processes still hold the pipes
            lingering = True
            jail.kill(pgid, mark)
            await asyncio.wait([proto.closed], timeout=2.0)
    except BaseException:  # cancelled (or worse): nothing may outlive us
        jail.kill(pgid, mark, leader_alive=not proto.exited.done())
        await asyncio.wait([proto.exited], timeout=5.0)
        raise
    finally:
        transport.close()  # a holder that left the session must not keep our pipes open
        alive = jail.alive(pgid, mark)
        if not alive:
            del jail.live[pgid]
    code = transport.get_returncode()
    return Outcome(exit_code=code if code is not None else -1, stdout=out, stderr=err,
                   timed_out=timed_out, timeout_s=timeout_s,
                   duration_s=time.perf_counter() - started, killed_lingering=lingering,
                   still_running=alive)


def _describe_exit(o: Outcome) -> str:
    if o.timed_out:
        return (f"timed out after {o.timeout_s:g} s: the command and every process it started "
                f"were killed")
    if o.exit_code < 0:
        try:
            name = signal.Signals(-o.exit_code).name
        except ValueError:
            name = f"signal {-o.exit_code}"
        return f"killed by {name}"
    return f"exit code {o.exit_code}"


def render(ctx: ToolContext, o: Outcome) -> str:
    """The text the model sees: status line, stdout, stderr, notes; within the output cap."""
    cap = output_cap(ctx)
    budget = cap - 400  # status line and notes
    lens = [len(o.stdout.text()), len(o.stderr.text())]
    if sum(lens) <= budget and o.stdout.complete and o.stderr.complete:
        budgets = lens
    elif lens[1] < budget // 4:
        budgets = [budget - lens[1], lens[1]]
    elif lens[0] < budget // 4:
        budgets = [lens[0], budget - lens[0]]
    else:
        budgets = [budget * 3 // 4, budget - budget * 3 // 4]
    parts = [f"[{_describe_exit(o)}; {o.duration_s:.2f} s]"]
    for name, capture, b in (("stdout", o.stdout, budgets[0]), ("stderr", o.stderr, budgets[1])):
        if capture.total:
            parts.append(f"--- {name} ---\n" + capture.render(b, name, cap).rstrip("\n"))
    if not o.stdout.total and not o.stderr.total:
        parts.append("(no output)")
    if o.killed_lingering:
        parts.append("[background processes kept the output open and were killed when the "
                     "command ended; to keep one running, redirect its output: cmd > log 2>&1 &]")
    elif o.still_running:
        parts.append("[background processes are still running; they are stopped when the run "
                     "ends]")
    return "\n".join(parts)


async def run(ctx: ToolContext, command: str, timeout_s: float | None = None) -> ToolResult:
    """Run a shell command (bash) in the workspace and return its exit code and output.

    The command runs with a scrubbed environment; on timeout it and everything it started are
    killed. Long output is cut in the middle (the result says how much).

    Args:
        command: the bash command line to run.
        timeout_s: seconds before the command is killed (capped by the run's tool timeout).
    """
    if not command.strip():
        raise ToolError("command is empty")
    o = await execute(ctx, command, _effective_timeout(ctx, timeout_s))
    return ToolResult(ok=o.exit_code == 0 and not o.timed_out, output=render(ctx, o),
                      data={"exit_code": o.exit_code, "timed_out": o.timed_out,
                            "duration_s": round(o.duration_s, 3),
                            "stdout_bytes": o.stdout.total, "stderr_bytes": o.stderr.total})


_SUMMARY = re.compile(r"^=*\s*(?P<body>.*?)\s+in\s+[\d.]+\s*s(?:econds)?\b.*?=*\s*$")
_COUNT = re.compile(r"(\d+)\s+(passed|failed|errors?|skipped|xfailed|xpassed|deselected|"
                    r"warnings?|rerun)")


def parse_pytest_summary(text: str) -> dict[str, int] | None:
    """Counts from pytest's last summary line ('3 passed, 1 failed in 0.12s'); None if absent."""
    for line in reversed(text.splitlines()):
        m = _SUMMARY.match(line.strip())
        if not m:
            continue
        body = m.group("body")
        counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        found = False
        for n, word in _COUNT.findall(body):
            found = True
            key = "errors" if word.startswith("error") else word
            if key in counts:
                counts[key] += int(n)
        if found or "no tests ran" in body:
            return counts
    return None


async def run_tests(ctx: ToolContext, selector: str | None = None) -> ToolResult:
    """Run the task's test command and report how many tests passed and failed.

    Args:
        selector: optional tests to run, appended to the test command (for pytest, e.g.
            'tests/test_x.py::test_name' or '-k name').
    """
    command = ctx.settings.get("test_command")
    if not command:
        raise ToolError("this task has no test command (settings['test_command'] is empty); "
                        "use run to run tests yourself")
    if selector:
        command = f"{command} {' '.join(shlex.quote(a) for a in shlex.split(selector))}"
    o = await execute(ctx, command, _effective_timeout(ctx, None))
    counts = parse_pytest_summary(o.stdout.text()) or parse_pytest_summary(o.stderr.text())
    data: dict[str, object] = {"exit_code": o.exit_code, "timed_out": o.timed_out,
                               "duration_s": round(o.duration_s, 3)}
    if counts is not None:
        data.update(passed=counts["passed"], failed=counts["failed"], errors=counts["errors"],
                    skipped=counts["skipped"])
        head = (f"[tests: {counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['errors']} errors]\n")
    else:
        data.update(passed=None, failed=None, errors=None)
        head = "[no pytest summary line found; see the output]\n"
    return ToolResult(ok=o.exit_code == 0 and not o.timed_out,
                      output=head + render(ctx, o), data=data)
