"""What a client may ask the service for: a run request parsed into a Task, or a 4xx naming the field.

The task is a path inside the server's tasks folder (relative to that folder, or to the server's
working directory), a task's name (a file of that stem in the tasks folder, else a shipped task:
:mod:`agentloop.config.shipped`), or an inline task object; an inline task and any ``limits`` go
through the same validation as a task file, so an error names the field the same way.
:func:`check_runnable` then checks at the door what would otherwise fail once the run started:
the tier, its key variable, a script for the simulator.

A submitted task is data from whoever can reach the port, so besides a task file's rules: the
body nests at most :data:`MAX_DEPTH` levels, no string in it holds a NUL, a path holds no
control character, and an inline task may not declare ``tiers`` (a tier names an endpoint and
the variable its key is read from: the server's key would go to the submitter's endpoint) nor
``allow_hosts`` (which gives the task's commands the host's network, the service's port
included). Error messages quote a submitted value only in part (:func:`shown`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentloop.api import resolve_tier
from agentloop.config.shipped import find_task, looks_like_name
from agentloop.config.tasks import Limits, LimitsModel, Task, parse_task
from agentloop.config.tiers import Tier, missing_key
from agentloop.config.where import field_name, problem
from agentloop.errors import FileLocatedError, RequestError, TaskFileError, TierFileError
from agentloop.trace.attrs import MAIN_AGENT

MAX_PATH = 1024  # characters of a task path (the OS refuses names past 255 bytes anyway)
MAX_DEPTH = 64  # levels of JSON nesting a request may have (a task file needs about 6)
_INLINE_REFUSED = {
    "tiers": "an inline task cannot define tiers (their endpoints and key variables); use "
    "a tier the server knows",
    "allow_hosts": "an inline task cannot widen the network (allow_hosts gives its commands "
    "the host's network); put the task in the server's tasks folder",
}


def shown(value: str, limit: int = 60) -> str:
    """``value`` quoted for an error message, cut to ``limit`` characters."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def check_shape(body: Any) -> None:
    """Refuse a body nested deeper than :data:`MAX_DEPTH` or holding a NUL anywhere."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(body, ())]
    while stack:
        obj, loc = stack.pop()
        if isinstance(obj, str):
            if "\x00" in obj:
                where = field_name(loc)
                raise RequestError(f"field '{where}' contains a NUL byte", field=where)
            continue
        if len(loc) >= MAX_DEPTH and isinstance(obj, dict | list):
            where = field_name(loc)
            raise RequestError(
                f"the body nests deeper than {MAX_DEPTH} levels (at '{where}')", field=where
            )
        if isinstance(obj, dict):
            for k, v in obj.items():
                if "\x00" in k:
                    where = field_name(loc)
                    raise RequestError(f"a key in '{where}' contains a NUL byte", field=where)
                stack.append((v, (*loc, k)))
        elif isinstance(obj, list):
            stack.extend((v, (*loc, i)) for i, v in enumerate(obj))


def _check_path(value: Any, field: str) -> None:
    if not isinstance(value, str):
        return
    if len(value) > MAX_PATH:
        raise RequestError(f"field '{field}': a path of at most {MAX_PATH} characters", field=field)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise RequestError(f"field '{field}': a path may not hold control characters", field=field)


class _RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str | dict[str, Any]
    tier: str | None = Field(default=None, max_length=200)
    limits: dict[str, Any] = {}
    routing: dict[str, str] = {}  # agent ("main": the top one) -> tier, over the task's


def _first_error(exc: ValidationError, prefix: str = "") -> RequestError:
    # pydantic tags a union's branches (str, dict[str,any]) onto the location: not body fields
    loc = tuple(p for p in exc.errors()[0]["loc"] if not str(p).startswith(("str", "dict")))
    where = prefix + field_name(loc)
    return RequestError(f"field '{where}': {problem(exc)}", field=where)


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def task_from_request(
    body: Any, *, tasks_dir: Path, known_tools: set[str]
) -> tuple[Task, str | None]:
    """Validate a ``POST /v1/runs`` body; (the task with its limits applied, the tier asked for)."""
    if not isinstance(body, dict):
        raise RequestError('the body must be a JSON object: {"task": ..., "tier": ...}', field="")
    check_shape(body)
    try:
        req = _RunRequest.model_validate(body)
    except ValidationError as exc:
        raise _first_error(exc) from None
    if isinstance(req.task, dict):
        task = _inline(req.task, tasks_dir, known_tools)
    elif not looks_like_name(req.task):
        task = _load(_task_path(req.task, tasks_dir), known_tools)
    elif (tasks_dir / f"{req.task}.yaml").is_file():  # a task of the tasks folder by its stem
        task = _load(tasks_dir / f"{req.task}.yaml", known_tools)
    else:
        try:
            found = find_task(req.task)
        except TaskFileError:
            raise RequestError(
                f"field 'task': no task named {shown(req.task)} in the tasks folder or "
                f"among the shipped tasks (give a task's name, a path inside {tasks_dir}, "
                "or an inline task object)",
                field="task",
            ) from None
        task = _load(found, known_tools)
    return _with_routing(_with_limits(task, req.limits), req.routing), req.tier


def _with_routing(task: Task, routing: dict[str, str]) -> Task:
    """``task`` with ``routing`` over its own ``routing:``; an agent it does not have is a 400
    naming it (the tiers are checked with the tier, by :func:`check_runnable`)."""
    if not routing:
        return task
    known = {a.name for a in task.agents} | {MAIN_AGENT}
    for agent in routing:
        if agent not in known:
            raise RequestError(
                f"field 'routing.{agent}': task '{task.name}' has no agent {shown(agent)} "
                f"(its agents: {', '.join(sorted(known))})",
                field=f"routing.{agent}",
            )
    return replace(task, routing={**task.routing, **routing})


def _task_path(given: str, tasks_dir: Path) -> Path:
    """A task path of a request: relative to the tasks folder (``incident/checkout-timeouts.yaml``)
    or to the server's working directory (``tasks/incident/...``); inside the tasks folder."""
    _check_path(given, "task")
    path = Path(given)
    if not path.is_absolute():
        for candidate in (tasks_dir / path, Path.cwd() / path):
            if candidate.is_file() and _inside(candidate, tasks_dir):
                return candidate
        if _inside(tasks_dir / path, tasks_dir):
            return tasks_dir / path  # not there: _load says so
    raise RequestError(
        f"field 'task': {shown(given)} is not inside the tasks folder {tasks_dir}", field="task"
    )


def _load(path: Path, known_tools: set[str]) -> Task:
    if not path.is_file():
        raise RequestError(f"field 'task': no such task file {shown(str(path), 200)}", field="task")
    from agentloop.config.tasks import load_task

    try:
        return load_task(path, known_tools)
    except FileLocatedError as exc:
        raise RequestError(f"field 'task': {exc.message}", field="task") from None


def _inline(data: dict[str, Any], tasks_dir: Path, known_tools: set[str]) -> Task:
    """An inline task: validated as a task file whose folder is the tasks folder."""
    for key, why in _INLINE_REFUSED.items():
        if data.get(key):
            raise RequestError(f"field 'task.{key}': {why}", field=f"task.{key}")
    _check_path(data.get("workspace"), "task.workspace")
    text = yaml.safe_dump(data, sort_keys=False)
    try:
        task = parse_task(text, tasks_dir.resolve() / "<inline task>", known_tools)
    except FileLocatedError as exc:
        field = f"task.{exc.field}" if exc.field else "task"
        message = exc.message.split(": ", 1)[-1]
        raise RequestError(f"field '{field}': {message}", field=field) from None
    if task.workspace is not None and not _inside(task.workspace, tasks_dir):
        raise RequestError(
            "field 'task.workspace': must be a folder inside the tasks folder",
            field="task.workspace",
        )
    return task


def _with_limits(task: Task, limits: dict[str, Any]) -> Task:
    """``task`` with ``limits`` on top of its own, validated like a task file's ``limits:``."""
    if not limits:
        return task
    mine = {k: getattr(task.limits, k) for k in LimitsModel.model_fields if hasattr(task.limits, k)}
    try:
        merged = LimitsModel.model_validate({**mine, **limits})
    except ValidationError as exc:
        raise _first_error(exc, "limits.") from None
    values = merged.model_dump()
    return replace(
        task, limits=Limits(**{k: values[k] for k in values if k in Limits.__dataclass_fields__})
    )


def check_runnable(task: Task, tier: str | None, tiers_file: Path | None) -> Tier:
    """The tier a run of ``task`` would use, once everything a run needs before its start is
    there (the tiers its routing names too); else a 400 naming the field (``tier``,
    ``routing.AGENT``, ``task.script``), said in HTTP terms.

    These would otherwise end an accepted run at its start (the unscripted rule is
    :func:`agentloop.api.execute`'s, the key's the model client's).
    """
    the_tier = _runnable(
        task, tier, tiers_file, "tier", "the task's own tier" if tier is None else "tier"
    )
    for agent, name in sorted(task.routing.items()):
        _runnable(task, name, tiers_file, f"routing.{agent}", f"the tier routed to '{agent}'")
    return the_tier


def _runnable(
    task: Task, tier: str | None, tiers_file: Path | None, field: str, named: str
) -> Tier:
    """One tier a run of ``task`` would call: known, paced if simulated, its key set."""
    try:
        the_tier = resolve_tier(task, tier, tiers_file)
    except TierFileError as exc:
        message = exc.message.split(": ", 1)[-1]
        raise RequestError(f"field '{field}': {message}", field=field) from None
    if the_tier.simulated and the_tier.profile is None:
        raise RequestError(
            f"field '{field}': {named} '{the_tier.name}' is simulated but has no speed profile "
            "on this server (measure one with agentloop probe there, or ask for another tier)",
            field=field,
        )
    if the_tier.simulated and not task.script:
        raise RequestError(
            f"field 'task.script': task '{task.name}' has no script, and {named} "
            f"'{the_tier.name}' is the simulator, which plays only scripted turns: ask for a "
            "real tier in 'tier', or give the task a 'script' of turns",
            field="task.script",
        )
    key = missing_key(the_tier)
    if key is not None:
        raise RequestError(
            f"field '{field}': {named} '{the_tier.name}' reads its API key from the server's "
            f"environment variable {key}, which is not set on this server: ask for another "
            "tier, or have the operator set it",
            field=field,
        )
    return the_tier
