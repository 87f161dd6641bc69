"""Shared fixtures: small real tools for runner tests, a trace built from memory records, and
the CLI called in-process (``run_cli``)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.config.tiers import Tier
from agentloop.sandbox.context import RunContext
from agentloop.testing import trace_of
from agentloop.trace.reader import Trace
from agentloop.types import ToolResult, ToolSpec

ROOT = Path(__file__).resolve().parent.parent


class SleepTool:
    """A real tool that sleeps for ``seconds`` (its argument) and reports when it ran."""

    spec = ToolSpec(
        "sleep",
        "Sleep for some seconds.",
        {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
    )

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        t0 = time.perf_counter()
        await asyncio.sleep(float(arguments["seconds"]))
        self.intervals.append((t0, time.perf_counter()))
        return ToolResult(ok=True, output=f"slept {arguments['seconds']}")


class ShellSleepTool:
    """A real tool that runs ``sleep N`` as a subprocess and records its pid."""

    spec = ToolSpec(
        "shell_sleep",
        "Run sleep in a subprocess.",
        {"type": "object", "properties": {"seconds": {"type": "number"}}},
    )

    def __init__(self) -> None:
        self.pids: list[int] = []

    async def __call__(self, ctx: Any, arguments: dict[str, Any]) -> ToolResult:
        proc = await asyncio.create_subprocess_exec(
            "sleep", str(arguments.get("seconds", 30)), start_new_session=True
        )
        self.pids.append(proc.pid)
        try:
            await proc.wait()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise
        return ToolResult(ok=True, output="done")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


async def wait_dead(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The pids still alive after waiting up to ``within_s`` (the kernel delivers SIGKILL async)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        await asyncio.sleep(0.05)
    return [p for p in pids if alive(p)]


async def terminate(
    proc: asyncio.subprocess.Process, within_s: float = 30.0
) -> tuple[bytes, bytes]:
    """Stop a child with SIGTERM and reap it: its remaining (stdout, stderr).

    SIGTERM, not SIGINT: a suite started in the background by a shell hands its children SIGINT
    ignored, so a SIGINT would be lost. A child still running after ``within_s`` (a bound about
    hangs) is killed and reaped, and TimeoutError raised: for use in ``finally``."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.communicate(), within_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise


def reap(proc: subprocess.Popen[Any], within_s: float = 30.0) -> int:
    """:func:`terminate` for a ``subprocess.Popen`` child, in ``finally``: its exit code. Its
    pipes are closed too: left to the garbage collector, one warns in whichever test runs then."""
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(within_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    return proc.returncode


def sigint_default() -> None:
    """A child's ``preexec_fn`` for a test that sends it SIGINT: SIGINT at its default, as in a
    terminal's foreground job, whatever this process inherited (a shell's background job, and
    so a suite started with ``&``, has SIGINT ignored, which a child keeps across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass(frozen=True)
class CliResult:
    """An in-process command's exit code and what it printed, named as ``subprocess.run``'s."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> CliResult:
    """``agentloop ARGS`` through ``agentloop.cli.main`` in this process, its output captured.

    The CLI's own code end to end (argument parsing, ``asyncio.run``, exit codes, messages on
    stderr) without a fresh interpreter's second of imports: for tests about what a command
    prints and returns. A test about signals, pipes or a process's own exit keeps a subprocess.
    ``env`` adds variables for the call only. Call it where no event loop runs (``main`` runs
    its own; ``run`` sets a signal handler, so the main thread)."""
    import structlog

    from agentloop.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's refusals (2) and --help/--version (0)
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if isinstance(exc.code, str):
                    err.write(exc.code + "\n")
    finally:
        structlog.reset_defaults()  # the CLI configured logging for its own run only
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CliResult(code, out.getvalue(), err.getvalue())


def within(measured: float, expected: float, rel: float, bound_s: float) -> bool:
    """A paced duration: never sooner than ``expected`` (less ``rel`` of it and ``bound_s``, the
    measuring loop's own lateness while it measured, ``agentloop.clients._lag``: an instant
    stamped late can shorten a duration by that much), and not so late that pacing stalled.

    Load only delays a paced answer, and by more than the loop's largest single lag (a starved
    process stretches every step before the server's clock starts), so the upper side is a
    bound about stalls: ``rel`` plus ``bound_s`` plus half the duration and half a second.
    How close a quiet machine comes is the benchmarks' figure (tests/benchmarks/bench_sim.py)."""
    low = expected * (1 - rel) - bound_s
    return low <= measured <= expected * (1 + rel) + bound_s + STALL_SHARE * expected + STALL_S


STALL_SHARE, STALL_S = 0.5, 0.5  # what a machine with every core busy may add to a paced duration


def held_drift_s(a: Any, b: Any) -> float:
    """Seconds by which two real runs' graphs (``a`` re-timed, ``b`` measured) differ in the
    categories the what-if keeps as recorded (the tools' own time, the client's overhead, the
    framework's gaps): what a busy machine added to one run and not the other, read from the
    two traces (:func:`agentloop.analysis.compare.compare`), not a prediction error."""
    from agentloop.analysis.compare import compare

    rows = compare(a, b).categories
    return sum(abs(r.predicted_ns - r.b_ns) for r in rows if r.predicted_ns == r.a_ns) / 1e9


# A simulated tier for tests that are not about speed: a model call costs ~10 ms instead of
# sim-ultrafast's 0.2 s plus 750 tok/s (an HLE question's 7,200 hidden tokens: 10 s). The text
# is what a project's ./tiers.toml would say, so a subprocess test writes it beside its run.
INSTANT_TOML = """\
[tiers.sim-instant]
base_url = "sim"
model = "sim-instant"
api = "responses"
profile = { base_latency_s = 0.01, prefill_tps = 1000000, output_tps = 100000 }
"""


def instant_tier(name: str = "sim-instant") -> Tier:
    """:data:`INSTANT_TOML`'s tier, for ``run_task(..., tier=instant_tier())`` in this process
    (``name``: the same tier by another name, as in :func:`instant_tiers_file`)."""
    import tomllib

    from agentloop.config.tiers import parse_tiers

    text = INSTANT_TOML.replace("sim-instant", name)
    return parse_tiers(tomllib.loads(text), "tests/conftest.py")[name]


INSTANT_NAMES = ("sim-instant", "sim-instant-b", "sim-instant-c")


def instant_tiers_file(folder: Path) -> Path:
    """``folder/tiers.toml`` holding :data:`INSTANT_TOML`'s tier under each of
    :data:`INSTANT_NAMES`: for runs that route agents or calls to tiers by name (``tiers_file=``,
    ``--tiers``) where which tier a call went to is the subject, not its speed."""
    path = folder / "tiers.toml"
    path.write_text("\n".join(INSTANT_TOML.replace("sim-instant", n) for n in INSTANT_NAMES))
    return path


def records_to_trace(records: list[dict[str, Any]]) -> Trace:
    """A MemorySink's records as a trace (the public helper's one implementation)."""
    return trace_of(records)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject's addopts): two workers for each core this process may use. Most
    of the suite's time is spent waiting (servers, subprocesses, jails, a paced simulator), so
    a core runs a second worker's test in the first's waits: on the project's 2-core machines
    the whole suite took 426 s with 2 workers, 346 s with 3, 333 s with 4 (load 2-7). The
    variable ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when it is set (xdist's own rule)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return 2 * len(os.sched_getaffinity(0))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``), the tests of a module that share one of its module-scoped
    fixtures (a Phoenix, a Ray head, a llama-server, the built wheel) go to one worker, so that
    program starts once (``--dist loadgroup``); every other test is spread one by one."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope != "function" and d[-1].baseid == module for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(module))
    if hasattr(config, "workerinput"):  # an xdist worker: its order is what xdist deals out
        # xdist deals the groups out first (by their test count, largest first), then the other
        # tests in this order: the marked ones (seconds each) before the rest, so the run ends
        # on tests of milliseconds and no worker idles behind another's long last test. Not in
        # one process (-n 0): there a module's tests stay together, each module fixture made once.
        items.sort(key=lambda item: all(item.get_closest_marker(m) is None for m in _LONG_MARKS))


_LONG_MARKS = ("slow", "external", "pacing")


@pytest.fixture(autouse=True)
def _unconfigured_logging() -> Iterator[None]:
    """Each test ends with structlog unconfigured again, as a fresh process starts: a CLI call
    (``main`` configures logging) must not decide what a later test on the same worker logs."""
    yield
    import structlog

    structlog.reset_defaults()


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext(workspace=tmp_path)


async def jail_survivors(ctx: RunContext, pids: list[int], within_s: float = 5.0) -> list[int]:
    """Of ``pids`` (as seen inside the run's jail), those still alive there after ``within_s``."""
    import agentloop_tools as tools

    check = "for p in " + " ".join(map(str, pids)) + "; do kill -0 $p 2>/dev/null && echo $p; done"
    deadline = time.monotonic() + within_s
    while True:
        r = await tools.registry()["run"](ctx, {"command": check + "; true"})
        left = [int(x) for x in r.output.split("--- stdout ---\n")[-1].split() if x.isdigit()]
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.1)


def pid_namespace(pid: int) -> str:
    """The PID namespace of a host process (``pid:[4026532...]``)."""
    return os.readlink(f"/proc/{pid}/ns/pid")


async def namespace_survivors(ns: str, within_s: float = 5.0) -> list[int]:
    """Host pids still in PID namespace ``ns`` after waiting up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.readlink(f"/proc/{name}/ns/pid") == ns and alive(int(name)):
                        left.append(int(name))
                except OSError:
                    pass
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.05)


def html_response(body: bytes) -> bytes:
    """A whole HTTP/1.1 200 answer carrying ``body`` as HTML, for the tests' raw page servers."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )


def same_profile(a: object, b: object, tol: float = 1e-3) -> bool:
    """Two speed profiles agree: the same fields unset, the set ones within ``tol`` (relative or
    absolute). pytest 9.2's approx refuses an unset (None) field, so this compares them itself."""
    import dataclasses

    da, db = dataclasses.asdict(a), dataclasses.asdict(b)  # type: ignore[call-overload]
    if da.keys() != db.keys() or {k for k in da if da[k] is None} != {
        k for k in db if db[k] is None
    }:
        return False
    return all(da[k] == pytest.approx(db[k], rel=tol, abs=tol) for k in da if da[k] is not None)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After the last test: one full collection (an object's ``__del__`` that raises still
    reaches pytest's unraisable-exception check), then what is left alive is frozen out of the
    collector's sight. pytest's exit check collects five more times (``unraisableexception.
    gc_collect_harder``), each a walk of the whole heap a session grew (about 0.25 s a walk
    in a worker, on each of the four); frozen, that heap is not walked again, and it is all
    alive, so nothing those walks could find is left out."""
    import gc

    gc.collect()
    gc.freeze()
