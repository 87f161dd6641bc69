"""Running a suite's runs as Ray tasks on a cluster; each trace comes back into the suite folder.

Ray (``pip install 'agentloop[ray]'``) is what LLM evaluation at scale already runs on. Each run
is one Ray task: a worker runs :func:`agentloop.api.run_task` (with the task and tier the driver
validated, pickled), writes its trace to a private temporary folder, and returns the run's
result with the trace's bytes; the driver writes the trace into ``DIR/traces/`` under the same
name. Nothing but the result and the trace crosses the cluster, so analysis (report, compare,
what-if) stays local, on the driver. A simulated tier runs its simulator inside the worker, next
to the run; a real endpoint is reached from the worker with the key named by ``api_key_env`` in
the worker's own environment (never shipped by agentloop).

Each Ray task asks for :data:`TASK_CPUS` of a CPU: an agent run spends most of its time waiting
on the model, so several share a core; the suite's ``--concurrency`` bounds how many are in
flight. The task file's workspace folder must be readable at the same path on the workers (true
on one machine; on many, ship it with a Ray ``runtime_env`` ``working_dir`` or a shared mount).

The service (``agentloop serve --ray``) starts runs through :meth:`RayBackend.start_run`, which
gives the same :class:`agentloop.handle.RunHandle` a local run has. Its runs stream back live:
the worker puts each event's JSON, with the bytes its trace grew by since the last one, into a
relay (one Ray actor of the server's, :class:`_Relay`); the server drains the relay into the
handle's events and the trace file in its own trace folder, so a client follows a run on a
worker as it would a local one and the trace grows on the server as the run goes. A cancel is
``ray.cancel``: the worker's run is cancelled as a local one is (trace closed ``cancelled``,
its last bytes and ``run_end`` relayed before the task ends), also on a cluster started with
SIGINT ignored (:func:`_interruptible`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import orjson

from agentloop import api
from agentloop.api import RunConfig, RunPlan
from agentloop.config.tasks import Task
from agentloop.errors import ConfigError
from agentloop.events import RunEvent
from agentloop.handle import RunHandle
from agentloop.loop.ending import RunResult
from agentloop.redact import redactor
from agentloop.sandbox.owned import make_owned, remove

TASK_CPUS = 0.25
POLL_S = 1.0  # the longest one wait of the server on the relay (a long poll)
END_GRACE_S = 10.0  # seconds the server waits for a worker's last relayed bytes after its end
CANCEL_GRACE_S = 30.0  # seconds a cancelled worker has to close its trace before a force-kill

# one relayed item: (the event's JSON or None, the bytes the trace grew by, whether it is the last)
Item = tuple[bytes | None, bytes, bool]


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    """A worker's private folder for one run's trace, removed after the run; owned as a run's
    copy is (:mod:`agentloop.sandbox.owned`): a worker killed mid-run leaves it to the sweep."""
    folder = make_owned("ray-")
    try:
        yield folder
    finally:
        remove(folder)


def _run_one(task: Any, config: RunConfig) -> dict[str, Any]:
    """On a Ray worker: one run, its result and its trace's name and bytes."""
    from agentloop.api import run_task

    with _scratch() as folder:
        try:
            result = asyncio.run(run_task(task, config=replace(config, trace_dir=folder)))
        except Exception as exc:  # its words cross, not the exception (not every one unpickles)
            return {"error": _said(exc)}
        trace = Path(result.trace_path) if result.trace_path else None
        data = trace.read_bytes() if trace is not None and trace.is_file() else b""
        return {
            "result": _fields(result),
            "trace_name": trace.name if trace else None,
            "trace": data,
        }


def _said(exc: Exception) -> str:
    """What a run raised on a worker, in words (the exception may not unpickle on the driver)."""
    return f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"


def _fields(result: RunResult) -> dict[str, Any]:
    """A result as it crosses the cluster: its fields but the worker's trace path."""
    fields = dataclasses.asdict(result)
    fields.pop("trace_path", None)
    return fields


class _Relay:
    """A Ray actor (async) the server owns: workers put their runs' items, the server takes
    them, per run in the order they were put (an async actor may run two puts out of order, so
    each is numbered and held until the ones before it are in)."""

    def __init__(self) -> None:
        self._held: dict[str, dict[int, Item]] = {}
        self._next: dict[str, int] = {}
        self._wake: dict[str, asyncio.Event] = {}

    async def put(self, key: str, seq: int, item: Item) -> None:
        self._held.setdefault(key, {})[seq] = item
        if key in self._wake:
            self._wake[key].set()

    async def take(self, key: str, wait_s: float) -> list[Item]:
        """The run's items in order from the last one taken; waits up to ``wait_s`` for one."""
        for waited in (False, True):
            held, n, out = self._held.get(key, {}), self._next.get(key, 0), []
            while n in held:
                out.append(held.pop(n))
                n += 1
            self._next[key] = n
            if out or waited:
                return out
            wake = self._wake.setdefault(key, asyncio.Event())
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), wait_s)
        return []

    async def drop(self, key: str) -> None:
        for book in (self._held, self._next, self._wake):
            book.pop(key, None)


class _Streamer:
    """On a worker: the run's event sink, relaying each event with the trace's new bytes."""

    def __init__(self, relay: Any, key: str, trace: Path) -> None:
        self.relay, self.key, self.trace = relay, key, trace
        self.seq = 0
        # the worker's secrets, as its trace pipeline hides them: an event comes from the runner
        # before that pipeline, and the server's redactor knows only the server's environment
        self._redact = redactor()
        self._file: IO[bytes] | None = None

    def _grown(self) -> bytes:
        if self._file is None:
            try:
                self._file = self.trace.open("rb")
            except FileNotFoundError:  # the trace starts once the model client is ready
                return b""
        return self._file.read()

    def _put(self, event: bytes | None, last: bool = False) -> Any:
        ref = self.relay.put.remote(self.key, self.seq, (event, self._grown(), last))
        self.seq += 1
        return ref

    def __call__(self, ev: RunEvent) -> None:
        plain = orjson.loads(orjson.dumps(ev.as_json(), default=str))  # the redactor walks JSON
        self._put(orjson.dumps(self._redact(plain)))

    async def run(self, plan: RunPlan, config: RunConfig) -> dict[str, Any]:
        try:
            return {"result": _fields(await api.execute(plan, replace(config, events=self)))}
        except Exception as exc:  # its words cross, not the exception (not every one unpickles)
            return {"error": _said(exc)}
        finally:  # also when cancelled: the server has every byte before the task ends
            await self._put(None, last=True)
            if self._file is not None:
                self._file.close()


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """On a Ray worker, for one task: SIGINT raises ``KeyboardInterrupt``, as in a fresh Python.

    ``ray.cancel`` reaches a running task as a simulated SIGINT (``_thread.interrupt_main``),
    which Python drops where SIGINT is ignored, and a worker inherits that from whoever started
    the cluster: ``ray start`` run by a script or in the background by a shell. The cancel was
    then lost and the run went on to its end (issue 30)."""
    if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL):
        yield  # Python's own handler (or one of Ray's): the interrupt is delivered
        return
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _stream_one(plan: RunPlan, config: RunConfig, relay: Any, key: str) -> dict[str, Any]:
    """On a Ray worker: one planned run, relayed as it goes; ``{"result": its fields}`` or
    ``{"error": what was raised, in words}``."""
    with _interruptible(), _scratch() as folder:
        here = replace(plan, trace_path=folder / plan.trace_path.name)
        return asyncio.run(_Streamer(relay, key, here.trace_path).run(here, config))


class RayBackend:
    """A connection to a Ray cluster that runs suite jobs as Ray tasks."""

    def __init__(self, address: str, config: RunConfig | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install 'agentloop[ray]'") from None
        self._ray = ray
        self.config = _shippable(config or RunConfig())
        try:
            if address == "local":  # start a one-machine cluster inside this process
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster: {exc}") from None
        self._remote = ray.remote(num_cpus=TASK_CPUS, max_retries=0)(_run_one)
        self._streamed = ray.remote(num_cpus=TASK_CPUS, max_retries=0)(_stream_one)
        self._relay: Any = None  # made at the first start_run (the suite has none)

    async def run(self, job: Any, traces: Path) -> RunResult:
        """Run ``job`` on the cluster; its trace is written into ``traces``."""
        ref = self._remote.remote(job.task, replace(self.config, tier=job.tier))
        try:
            out = await ref
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)
            raise
        except self._ray.exceptions.RayError as exc:
            raise ConfigError(f"Ray task for {job.task.name} failed: {exc}") from None
        if "error" in out:
            raise ConfigError(f"{job.task.name} failed on its Ray worker: {out['error']}")
        path = None
        if out["trace_name"]:
            path = traces / out["trace_name"]
            await asyncio.to_thread(path.write_bytes, out["trace"])
        return RunResult(**out["result"], trace_path=str(path) if path else None)

    # -- the service's runs ---------------------------------------------------------------------

    async def start_run(self, task: Task, *, config: RunConfig) -> RunHandle:
        """:func:`agentloop.start_run` on the cluster: the run is planned here (its id and trace
        path are the server's), executed by a worker, its events and trace relayed back."""
        plan = api.plan_run(task, config)
        if self._relay is None:
            self._relay = self._ray.remote(num_cpus=0)(_Relay).remote()
        handle = RunHandle(plan)
        job = self._drive(plan, _shippable(config), handle)
        handle._start(asyncio.create_task(job, name=f"agentloop-ray-run-{plan.run_id}"))
        return handle

    async def _drive(self, plan: RunPlan, config: RunConfig, handle: RunHandle) -> RunResult:
        """Submit the run, relay it into ``handle`` and the server's trace file until it ends; a
        cancel of this task is a ``ray.cancel`` of the worker's (the run ends ``cancelled``)."""
        ray, key = self._ray, plan.run_id
        me = asyncio.current_task()
        assert me is not None
        ref = self._streamed.remote(plan, config, self._relay, key)
        heard = asyncio.Event()  # the worker began: its last item will come
        pump = asyncio.create_task(self._pump(key, plan.trace_path, handle, heard))
        done = asyncio.wrap_future(ref.future())
        cancelled = False
        try:
            while not done.done():
                try:
                    await asyncio.wait([done], timeout=CANCEL_GRACE_S if cancelled else None)
                except asyncio.CancelledError:
                    if not cancelled:  # again: the worker is closing its trace already
                        cancelled = True
                        me.uncancel()
                        ray.cancel(ref)  # a KeyboardInterrupt in the worker: its run is cancelled
                    continue
                if not done.done():  # cancelled and the worker did not end in time: kill it
                    ray.cancel(ref, force=True)
            # the worker put its last item before its task ended; one that never began has none
            grace = END_GRACE_S if heard.is_set() or done.exception() is None else 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), grace)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            self._relay.drop.remote(key)
        try:
            out = done.result()
        except ray.exceptions.TaskCancelledError:
            raise asyncio.CancelledError from None  # the handle's cancelled result, from run_end
        except ray.exceptions.RayError as exc:  # the cluster's (a worker or node lost)
            raise ConfigError(f"the Ray task of run {key} failed: {exc}") from None
        if "error" in out:  # raised in the run, on the worker
            raise ConfigError(f"the run failed on its Ray worker: {out['error']}")
        return RunResult(**out["result"], trace_path=str(plan.trace_path))

    async def _pump(self, key: str, trace: Path, handle: RunHandle, heard: asyncio.Event) -> None:
        """The relay's items into the trace file (first) and the handle's events (then), so a
        client told of an event finds its record in the trace."""
        file: IO[bytes] | None = None
        try:
            while True:
                for event, grown, last in await self._relay.take.remote(key, POLL_S):
                    heard.set()
                    if grown:
                        if file is None:
                            trace.parent.mkdir(parents=True, exist_ok=True)
                            file = trace.open("ab")
                        file.write(grown)
                        file.flush()
                    if event is not None:
                        handle._push(RunEvent(**orjson.loads(event)))
                    if last:
                        return
        finally:
            if file is not None:
                file.close()

    def close(self) -> None:
        self._ray.shutdown()


def _shippable(config: RunConfig) -> RunConfig:
    """What crosses the cluster: the run's settings, not this process's objects (a client, the
    tools, event sinks: a worker has its own)."""
    return replace(config, client=None, tools=None, events=None, observer=None)
