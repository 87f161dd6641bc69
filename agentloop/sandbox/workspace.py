"""A run's place: a fresh copy of the task's workspace, the run's jail, its setup and success check.

Working copies are folders a run owns (:mod:`agentloop.sandbox.owned`: under
``$TMPDIR/agentloop-work``, each marked with its owner process, swept once that is gone), as are
the task's tests saved for the success check, beside the copy.
Setup commands and the success check run in the run's jail through :func:`agentloop.sandbox.proc.run`,
like the tools' commands: a service a setup command starts with ``&`` lives for the whole run.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentloop.config.tasks import Task
from agentloop.errors import ConfigError, TaskFileError
from agentloop.log import get_logger
from agentloop.sandbox import proc, taskenv
from agentloop.sandbox.closer import JailCloser
from agentloop.sandbox.context import scrubbed_env
from agentloop.sandbox.jail import NO_BWRAP, Jail, JailSpec, open_jail
from agentloop.sandbox.owned import disown, make_owned, remove
from agentloop.sandbox.venvcache import install_commands
from agentloop.sandbox.verdict import save_tests, verdict_jail

SETUP_OUTPUT_CAP = 16_000  # bytes of a setup / check command's output kept (head and tail)
# what wraps each stage of a run's preparation ("copy", "jail", "setup commands"): the caller's
# (a run times each as a part of its set-up span); the sandbox only names them
Stage = Callable[[str], contextlib.AbstractAsyncContextManager[object]]


def make_copy(task: Task, root: Path | None) -> Path:
    """A new, owned, empty working folder (blocking), after sweeping abandoned ones."""
    return make_owned(f"{task.name}-", root)


@dataclass
class Place:
    """A prepared run: its working copy and its jail (open until :meth:`close`)."""

    path: Path
    jail: Jail
    tests: Path | None = (
        None  # the task's test files as set up (agentloop.sandbox.verdict.save_tests)
    )

    async def close(self, *, keep: bool = False, closer: JailCloser | None = None) -> None:
        """Run end: the jail closes (every process of the run dies; a suite's ``closer`` tears
        it down behind), the copy goes unless kept."""
        await self.jail.aclose(closer)
        if self.tests is not None:
            await asyncio.to_thread(remove, self.tests.parent)
        if keep:  # a kept copy is the user's now: never swept
            await asyncio.to_thread(disown, self.path)
        else:
            await asyncio.to_thread(remove, self.path)


async def run_command(
    cmd: str, cwd: Path, env: dict[str, str], timeout_s: float, jail: Jail | None = None
) -> tuple[int, str]:
    """Run a task command to its end; (exit code, combined output). Background processes live on.

    Exit code 124 on timeout, as coreutils' timeout reports it. Without ``jail`` a jail is
    opened for this one command (and closed after it, with whatever it left running).
    """
    own = jail is None
    the_jail = jail if jail is not None else await open_jail(JailSpec(workspace=cwd))
    try:
        o = await proc.run(
            the_jail,
            cmd,
            cwd=cwd,
            env=env,
            timeout_s=timeout_s,
            cap=SETUP_OUTPUT_CAP,
            background="keep",
        )
    finally:
        if own:
            await the_jail.aclose()
    if o.timed_out:
        return proc.TIMEOUT_EXIT, f"timed out after {timeout_s:g} s"
    return o.exit_code, proc.combined(o)


async def prepare_run(
    task: Task,
    root: Path | None = None,
    *,
    writable: tuple[Path, ...] = (),
    readonly: tuple[Path, ...] = (),
    path_prefix: tuple[str, ...] = (),
    require_jail: bool = False,
    bwrap: str | None = None,
    setup: Sequence[int] | None = None,
    stage: Stage | None = None,
) -> Place:
    """Copy the task's workspace, open the run's jail over it, run the setup commands in it.

    ``readonly`` and ``path_prefix``: the task's environment folder (its venv, shown read-only)
    and the folders put first on the commands' PATH (that venv's ``bin/``), from
    :mod:`agentloop.sandbox.taskenv`; ``writable``: folders shown writable (a venv being built);
    ``setup``: the indexes of the setup commands to run (default: every one); ``stage``: what
    wraps each of the three stages, ``copy``, ``jail`` and ``setup commands``.
    """
    around = stage or _no_stage
    work: Path | None = None
    jail: Jail | None = None
    try:
        async with around("copy"):
            work = await asyncio.to_thread(make_copy, task, root)
            if task.workspace is not None:
                await asyncio.to_thread(
                    shutil.copytree, task.workspace, work, symlinks=True, dirs_exist_ok=True
                )
        async with around("jail"):
            spec = JailSpec(
                workspace=work,
                writable=writable,
                readonly=readonly,
                allow_network=bool(task.allow_hosts),
                path_prefix=path_prefix,
            )
            jail = await open_jail(spec, bwrap=bwrap)
            _refuse_or_warn(jail, require_jail)
        async with around("setup commands"):
            which = range(len(task.setup)) if setup is None else setup
            await _run_setup(task, work, jail, which)
            # the task's tests as set up, before the model's first command: the check's own copy
            tests = await asyncio.to_thread(save_tests, work)
    except BaseException:
        if jail is not None:
            await asyncio.shield(jail.aclose())
        if work is not None:
            await asyncio.shield(asyncio.to_thread(remove, work))
        raise
    return Place(work, jail, tests)


def _no_stage(name: str) -> contextlib.AbstractAsyncContextManager[object]:
    return contextlib.nullcontext()


def _refuse_or_warn(jail: Jail, require_jail: bool) -> None:
    """No jail here: refuse the run when one is required (a real model's commands), else say
    loudly that its commands run unconfined."""
    if not jail.confined and require_jail:
        raise ConfigError(
            "no jail can be had here, and this run's commands come from a real model, whose "
            f"output is hostile input ({jail.confinement['reason']}). Install the jail, or "
            "pass --unconfined (unconfined=True) to run them on the host anyway."
        )
    if not jail.confined:  # one sentence a person reads, the install hint in it (issue 24)
        get_logger("agentloop.sandbox.workspace").warning(unconfined_warning(jail))


def unconfined_warning(jail: Jail) -> str:
    """What a run without a jail says: why, what is not confined, and how to get the jail."""
    reason = str(jail.confinement["reason"]).rstrip(".")
    hint = (
        ""
        if NO_BWRAP in reason
        else f" To confine them, install the jail ({NO_BWRAP.split(': ', 1)[1]}) and check "
        "that it can start here."
    )
    return (
        f"task commands run UNCONFINED on this host: {reason}. Not confined: "
        f"{jail.confinement['not_confined']}.{hint}"
    )


async def _run_setup(task: Task, work: Path, jail: Jail, which: Sequence[int]) -> None:
    """The task's setup commands ``which`` (indexes), in order, in the run's jail; the first
    that fails is a TaskFileError naming its index, exit code and last output."""
    env = scrubbed_env()
    for i in which:
        cmd = task.setup[i]
        code, out = await run_command(cmd, work, env, task.limits.tool_timeout_s, jail)
        if code != 0:
            tail = out.strip().splitlines()[-5:]
            raise TaskFileError(
                task.source or task.name,
                f"setup command failed with exit code {code}: {cmd!r}"
                + (f"; last output: {' | '.join(tail)}" if tail else ""),
                field=f"setup[{i}]",
            )


async def build_setup(task: Task, venv: Path) -> None:
    """A task venv's build step: the task's install commands
    (:func:`agentloop.sandbox.venvcache.install_commands`), once, in a jail of their own over a
    scratch copy of the workspace, with the venv writable (``setup: pip install`` lands there);
    everything they started dies with that jail (:func:`agentloop.sandbox.taskenv.ensure`)."""
    env = taskenv.env_for(venv)
    with taskenv.activate(env):
        place = await prepare_run(
            task,
            writable=(venv,),
            path_prefix=env.path_prefix,
            setup=install_commands(task),
        )
    await place.close()


async def prepare(task: Task, root: Path | None = None) -> Path:
    """Copy the task's workspace and run its setup (in a jail closed right after); the copy,
    the caller's from now on (never swept), and nothing else left behind."""
    place = await prepare_run(task, root)
    await place.close(keep=True)
    return place.path


async def check_success(
    task: Task, work: Path, final_text: str, jail: Jail | None = None, *, tests: Path | None = None
) -> dict[str, Any]:
    """The task's success check: its command must exit 0 and/or its text must be in the answer.

    ``tests``: the task's test files as set up (:attr:`Place.tests`), put back for the check.
    """
    result: dict[str, Any] = {"passed": True, "detail": ""}
    details = []
    if task.success_command:
        if jail is None:
            code, out = await run_command(
                task.success_command, work, scrubbed_env(), task.limits.tool_timeout_s
            )
        else:  # never through the run's own init (agentloop.sandbox.verdict)
            async with verdict_jail(jail, work, pristine=tests) as vj:
                code, out = await run_command(
                    task.success_command, work, scrubbed_env(), task.limits.tool_timeout_s, vj
                )
        result.update(command=task.success_command, exit_code=code, output=out[-2000:])
        if code != 0:
            result["passed"] = False
        details.append(f"`{task.success_command}` exited {code}")
    if task.success_text is not None:
        found = task.success_text in final_text
        result["expect_text"] = task.success_text
        result["passed"] = result["passed"] and found
        details.append(f"expected text {'found' if found else 'not found'} in the final answer")
    if not details:
        return {"passed": None, "detail": "no success check"}
    result["detail"] = "; ".join(details)
    return result
