"""Shell tools: run a command, run the task's tests; real subprocesses in the run's jail.

Every command runs as ``bash -c`` in the workspace with the scrubbed environment, through the one
process runner (:func:`agentloop.sandbox.run_command`) in the run's jail (:mod:`agentloop.sandbox.jail`). A timeout,
or cancellation of the awaiting task, kills it and everything it started. Background processes
that keep the output pipes open are killed when the command ends; ones that redirect their
output keep running (a server for the browser, say) until the run ends, when the jail closes.
"""

from __future__ import annotations

import re
import shlex
import signal

from agentloop_tools._sandbox import output_cap, subprocess_env, tool_timeout, workspace

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.sandbox import Outcome, run_command, verdict_jail
from agentloop.types import ToolResult


def _effective_timeout(ctx: ToolContext, requested: float | None) -> float:
    ceiling = tool_timeout(ctx)
    if requested is not None and requested <= 0:
        raise ToolError(f"timeout_s must be positive, got {requested:g}")
    if requested is not None and requested < ceiling:
        return requested
    # a little under the runner's own ceiling, so this tool's clean kill wins the race
    return max(ceiling - 0.5, ceiling * 0.9)


async def execute(ctx: ToolContext, command: str, timeout_s: float) -> Outcome:
    """Run ``bash -c command`` in the run's jail; killed with all it started on timeout/cancel."""
    jail = await ctx.the_jail()
    return await run_command(
        jail,
        command,
        cwd=workspace(ctx),
        env=subprocess_env(ctx),
        timeout_s=timeout_s,
        cap=output_cap(ctx),
        background="kill",
    )


def succeeded(o: Outcome) -> bool:
    """A command succeeded: exit 0, in time, and it never ran into the jail's process limit."""
    return o.exit_code == 0 and not o.timed_out and not o.process_limit_hits


def _describe_exit(o: Outcome) -> str:
    if o.timed_out:
        return (
            f"timed out after {o.timeout_s:g} s: the command and every process it started "
            f"were killed"
        )
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
    if o.process_limit_hits:
        parts.append(
            f"[the run's process limit was hit: {o.process_limit_hits:,} fork(s) "
            f"refused; the command failed]"
        )
    if o.killed_lingering:
        parts.append(
            "[background processes kept the output open and were killed when the "
            "command ended; to keep one running, redirect its output: cmd > log 2>&1 &]"
        )
    elif o.still_running:
        parts.append("[background processes are still running; they are stopped when the run ends]")
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
    return ToolResult(
        ok=succeeded(o),
        output=render(ctx, o),
        data={
            "exit_code": o.exit_code,
            "timed_out": o.timed_out,
            "duration_s": round(o.duration_s, 3),
            "process_limit_hits": o.process_limit_hits,
            "stdout_bytes": o.stdout.total,
            "stderr_bytes": o.stderr.total,
        },
    )


_SUMMARY = re.compile(r"^=*\s*(?P<body>.*?)\s+in\s+[\d.]+\s*s(?:econds)?\b.*?=*\s*$")
_COUNT = re.compile(
    r"(\d+)\s+(passed|failed|errors?|skipped|xfailed|xpassed|deselected|"
    r"warnings?|rerun)"
)


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
    command = ctx.settings.test_command
    if not command:
        raise ToolError(
            "this task has no test command (its test_command is empty); "
            "use run to run tests yourself"
        )
    if selector:
        command = f"{command} {' '.join(shlex.quote(a) for a in shlex.split(selector))}"
    jail = await ctx.the_jail()
    # its own jail over a snapshot, never through the run's init: a command of the run cannot
    # forge the outcome (agentloop.sandbox.verdict)
    async with verdict_jail(jail, workspace(ctx)) as vj:
        o = await run_command(
            vj,
            command,
            cwd=workspace(ctx),
            env=subprocess_env(ctx),
            timeout_s=_effective_timeout(ctx, None),
            cap=output_cap(ctx),
            background="kill",
        )
    counts = parse_pytest_summary(o.stdout.text()) or parse_pytest_summary(o.stderr.text())
    data: dict[str, object] = {
        "exit_code": o.exit_code,
        "timed_out": o.timed_out,
        "duration_s": round(o.duration_s, 3),
    }
    if counts is not None:
        data.update(
            passed=counts["passed"],
            failed=counts["failed"],
            errors=counts["errors"],
            skipped=counts["skipped"],
        )
        head = (
            f"[tests: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['errors']} errors]\n"
        )
    else:
        data.update(passed=None, failed=None, errors=None)
        head = "[no pytest summary line found; see the output]\n"
    return ToolResult(ok=succeeded(o), output=head + render(ctx, o), data=data)
