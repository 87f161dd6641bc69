"""Task files (YAML): loading, validation with file/line/field errors, and the Task value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from agentloop.config import mcp
from agentloop.config._task_schema import LimitsModel as LimitsModel
from agentloop.config._task_schema import _TaskModel
from agentloop.config.agents import Agent as Agent
from agentloop.config.agents import checked_agents
from agentloop.config.limits import Limits as Limits
from agentloop.config.mcp import McpServer
from agentloop.config.tiers import Tier, parse_tiers
from agentloop.config.where import field_name, key_line, node_at, problem, refuse_twice
from agentloop.errors import TaskFileError, TierFileError
from agentloop.script import ScriptTurn

# A requirement is a package specifier only (PEP 508 without the URL form): a name, optional
# extras, optional version clauses, optional environment marker. The host's uv installs the
# task venv outside the jail, so a pip option (`--index-url`, `-r FILE`, `-e`), a path (a local
# source tree runs its build backend on the host) or a URL (`pkg @ https://...`) must not get in.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"(?:~=|===|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_REQUIREMENT = re.compile(
    rf"{_NAME}\s*(?:\[\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\])?"
    rf"\s*(?:\(?\s*{_VERSION}(?:\s*,\s*{_VERSION})*\s*\)?)?"
    r"\s*(?:;[A-Za-z0-9_ .'\"<>=!~()]*)?"
)
MAX_REQUIREMENT = 200
# a bare name ending like an archive is a file to pip and uv (`x.tar.gz` installs ./x.tar.gz)
_ARCHIVE = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz")


def requirement_problem(text: str) -> str | None:
    """Why ``text`` is not a plain package specifier (None when it is one)."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    if len(text) > MAX_REQUIREMENT:  # also keeps the pattern's backtracking short
        return f"{shown!r} is longer than {MAX_REQUIREMENT} characters: not a package specifier"
    name = re.match(_NAME, text.strip())
    archive = name is not None and name.group().lower().endswith(_ARCHIVE)
    if _REQUIREMENT.fullmatch(text.strip()) and not archive:
        return None
    if text.lstrip().startswith("-"):
        what = "a pip option"
    elif "://" in text or "@" in text:
        what = "a URL"
    elif "/" in text or "\\" in text or text.strip().startswith(".") or archive:
        what = "a path"
    else:
        what = "not a package specifier"
    return (
        f"{shown!r} is {what}: a requirement must be a package name with optional extras and "
        "version, like 'requests[socks]>=2,<3' (no options, paths or URLs)"
    )


@dataclass(frozen=True)
class Task:
    """A validated task. ``workspace`` is an absolute folder copied fresh for every run."""

    name: str
    prompt: str
    system: str
    source: Path | None = None
    description: str = ""
    workspace: Path | None = None
    setup: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()  # pip requirements of the task's own venv (+ pytest)
    tools: tuple[str, ...] = ()
    finish_tool: bool = True
    test_command: str | None = None
    allow_hosts: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    tier: str | None = None
    tier_line: int | None = None  # where ``tier:`` is written, to blame an unknown name on
    tiers: dict[str, Tier] = field(default_factory=dict)
    success_command: str | None = None
    success_text: str | None = None
    script: tuple[ScriptTurn, ...] = ()
    agents: tuple[Agent, ...] = ()  # sub-agents; the main agent calls those its tools name
    routing: dict[str, str] = field(default_factory=dict)  # agent name ("main") -> tier name

    def agent(self, name: str) -> Agent | None:
        return next((a for a in self.agents if a.name == name), None)

    mcp_servers: tuple[McpServer, ...] = ()  # the servers ``mcp:`` entries of tools name


def parse_task(text: str, path: Path, known_tools: set[str] | None = None) -> Task:
    """Validate a task file's text. ``known_tools`` (tool registry names) checks the tools list."""
    root, m = _validated(text, path)
    workspace = None
    if m.workspace is not None:
        workspace = (path.parent / m.workspace).resolve()
        if not workspace.is_dir():
            raise TaskFileError(
                path,
                f"workspace folder {workspace} does not exist",
                line=key_line(root, ("workspace",)),
                field="workspace",
            )
    servers = _mcp_servers(m, root, path)
    if known_tools is not None:
        _check_tools(m, root, path, known_tools | {a.name for a in m.agents})
    agents = checked_agents(m, root, path, known_tools)
    try:
        tiers = parse_tiers({"tiers": m.tiers}, path) if m.tiers else {}
    except TierFileError as exc:
        raise TaskFileError(
            path, exc.message.split(": ", 1)[-1], line=key_line(root, ("tiers",)), field=exc.field
        ) from None
    for i, req in enumerate(m.requirements):
        why = requirement_problem(req)
        if why is not None:
            raise TaskFileError(
                path, why, line=key_line(root, ("requirements", i)), field=f"requirements[{i}]"
            )
    return Task(
        name=m.name,
        prompt=m.prompt,
        system=m.system,
        source=path,
        description=m.description,
        workspace=workspace,
        setup=tuple(m.setup),
        requirements=tuple(m.requirements),
        tools=tuple(m.tools),
        finish_tool=m.finish_tool,
        test_command=m.test_command,
        allow_hosts=tuple(m.allow_hosts),
        limits=Limits(**m.limits.model_dump()),
        tier=m.tier,
        tier_line=key_line(root, ("tier",)) if m.tier is not None else None,
        tiers=tiers,
        success_command=m.success.command,
        success_text=m.success.expect_text,
        script=tuple(ScriptTurn.from_dict(t.model_dump()) for t in m.script),
        agents=agents,
        routing=dict(m.routing),
        mcp_servers=servers,
    )


def _mcp_servers(m: _TaskModel, root: yaml.Node | None, path: Path) -> tuple[McpServer, ...]:
    """The task's MCP servers, each checked (:mod:`agentloop.config.mcp`)."""
    for name, server in m.mcp_servers.items():
        bad = mcp.problem(name, server)
        if bad is not None:
            where = ("mcp_servers", name, *((bad[0].split("[")[0],) if bad[0] else ()))
            raise TaskFileError(
                path,
                bad[1],
                line=key_line(root, where),
                field=f"mcp_servers.{name}" + (f".{bad[0]}" if bad[0] else ""),
            )
    return tuple(mcp.build(name, server) for name, server in m.mcp_servers.items())


def _validated(text: str, path: Path) -> tuple[yaml.Node | None, _TaskModel]:
    """The file's YAML node tree (for line numbers) and its validated model."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise TaskFileError(path, f"not valid YAML: {exc.problem or exc}", line=line) from None
    if not isinstance(data, dict):
        raise TaskFileError(
            path, "a task file must be a YAML mapping (name:, prompt:, ...)", line=1
        )
    refuse_twice(root, path)
    try:
        return root, _TaskModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        while (
            loc
            and not node_at(root, loc)[1]
            and err["type"] != "missing"
            and err["type"] != "extra_forbidden"
        ):
            loc = loc[:-1]  # drop pydantic's union-branch tags, which are not YAML keys
        raise TaskFileError(
            path, problem(exc), line=key_line(root, loc), field=field_name(loc)
        ) from None


def _check_tools(m: _TaskModel, root: yaml.Node | None, path: Path, known_tools: set[str]) -> None:
    """Every tool the task lists, and every tool its script calls, is one the registry has
    (an ``mcp:`` entry names one of the task's servers; their tools are known at the run)."""
    from_mcp: set[str] = set()
    whole_server = False
    for i, name in enumerate(m.tools):
        ref = mcp.parse_ref(name)
        if ref is not None:
            if ref[0] not in m.mcp_servers:
                raise TaskFileError(
                    path,
                    f"'{name}' names MCP server '{ref[0]}', which mcp_servers does not define"
                    f" (defined: {', '.join(sorted(m.mcp_servers)) or 'none'})",
                    line=key_line(root, ("tools", i)),
                    field=f"tools[{i}]",
                )
            if ref[1] is None:
                whole_server = True
            else:
                from_mcp.add(ref[1])
            continue
        if name not in known_tools:
            raise TaskFileError(
                path,
                f"unknown tool '{name}' (known tools: {', '.join(sorted(known_tools))})",
                line=key_line(root, ("tools", i)),
                field=f"tools[{i}]",
            )
    for i, turn in enumerate(m.script):
        for j, call in enumerate(turn.tool_calls):
            if whole_server or call.name in from_mcp:
                continue  # an MCP server's tools are listed when the run starts
            if call.name not in known_tools and call.name != "finish":
                # a script may name a tool the task does not allow (to exercise the error
                # path), but a tool nobody has is almost surely a typo
                raise TaskFileError(
                    path,
                    f"script names unknown tool '{call.name}'",
                    line=key_line(root, ("script", i, "tool_calls", j, "name")),
                    field=f"script[{i}].tool_calls[{j}].name",
                )


def load_task(path: str | Path, known_tools: set[str] | None = None) -> Task:
    """Read and validate a task file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskFileError(p, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(p, f"cannot read: {exc}") from None
    return parse_task(text, p.resolve(), known_tools)
