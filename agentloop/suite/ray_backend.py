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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentloop.api import RunConfig
from agentloop.errors import ConfigError
from agentloop.loop.ending import RunResult

TASK_CPUS = 0.25


def _run_one(task: Any, config: RunConfig) -> dict[str, Any]:
    """On a Ray worker: one run, its result and its trace's name and bytes."""
    from agentloop.api import run_task

    folder = Path(tempfile.mkdtemp(prefix="agentloop-ray-"))
    try:
        result = asyncio.run(run_task(task, config=replace(config, trace_dir=folder)))
        trace = Path(result.trace_path) if result.trace_path else None
        data = trace.read_bytes() if trace is not None and trace.is_file() else b""
        fields = dataclasses.asdict(result)
        fields.pop("trace_path", None)
        return {"result": fields, "trace_name": trace.name if trace else None, "trace": data}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class RayBackend:
    """A connection to a Ray cluster that runs suite jobs as Ray tasks."""

    def __init__(self, address: str, config: RunConfig) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install 'agentloop[ray]'") from None
        self._ray = ray
        # what crosses the cluster: the run's settings, not this process's objects (a client,
        # the tools, event sinks: a worker has its own)
        self.config = replace(config, client=None, tools=None, events=None, observer=None)
        try:
            if address == "local":  # start a one-machine cluster inside this process
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster: {exc}") from None
        self._remote = ray.remote(num_cpus=TASK_CPUS, max_retries=0)(_run_one)

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
        path = None
        if out["trace_name"]:
            path = traces / out["trace_name"]
            await asyncio.to_thread(path.write_bytes, out["trace"])
        return RunResult(**out["result"], trace_path=str(path) if path else None)

    def close(self) -> None:
        self._ray.shutdown()
