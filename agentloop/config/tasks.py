"""Task files (YAML): loading, validation with file/line/field errors, and the Task value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentloop.config import mcp
from agentloop.config.limits import Limits as Limits
from agentloop.config.mcp import McpServer
from agentloop.config.tiers import Tier, parse_tiers
from agentloop.errors import TaskFileError, TierFileError
from agentloop.script import ScriptTurn
from agentloop.trace.attrs import MAIN_AGENT


class _ToolCallModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class _TurnModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    reasoning_tokens: int = Field(default=0, ge=0)
    tool_calls: list[_ToolCallModel] = Field(default_factory=list)


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


_DEFAULT = Limits()  # the defaults' one owner: agentloop/config/limits.py


class _LimitsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_steps: int = Field(default=_DEFAULT.max_steps, gt=0)
    max_output_tokens: int = Field(default=_DEFAULT.max_output_tokens, gt=0)
    timeout_s: float = Field(default=_DEFAULT.timeout_s, gt=0)
    max_parallel_tools: int = Field(default=_DEFAULT.max_parallel_tools, gt=0)
    tool_timeout_s: float = Field(default=_DEFAULT.tool_timeout_s, gt=0)
    max_cost_usd: float | None = Field(default=_DEFAULT.max_cost_usd, gt=0)
    max_agent_depth: int = Field(default=_DEFAULT.max_agent_depth, gt=0)


LimitsModel = _LimitsModel  # the limits' validation, shared with the service's run requests


class _SuccessModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str | None = None
    expect_text: str | None = None


class _AgentModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    description: str = Field(min_length=1)
    system: str = "You are a careful engineer. Use the tools to do the task, then say what you did."
    prompt: str = "{input}"  # the caller's input goes where {input} is
    tools: list[str] = Field(default_factory=list)
    agents: list[str] = Field(default_factory=list)  # the sub-agents this one may call
    tier: str | None = None  # default: the main agent's tier
    limits: _LimitsModel = Field(default_factory=_LimitsModel)
    finish_tool: bool = True
    script: list[_TurnModel] = Field(default_factory=list)  # the turns of every invocation

    @field_validator("tools", "agents", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class _TaskModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    description: str = ""
    prompt: str = Field(min_length=1)
    system: str = "You are a careful engineer. Use the tools to do the task, then say what you did."
    workspace: str | None = None
    setup: list[str] = Field(default_factory=list)
    requirements: list[str] = Field(default_factory=list)  # the task venv's packages (taskenv)
    tools: list[str] = Field(default_factory=list)
    finish_tool: bool = True
    test_command: str | None = None
    allow_hosts: list[str] = Field(default_factory=list)
    limits: _LimitsModel = Field(default_factory=_LimitsModel)
    tier: str | None = None
    tiers: dict[str, Any] = Field(default_factory=dict)
    success: _SuccessModel = Field(default_factory=_SuccessModel)
    script: list[_TurnModel] = Field(default_factory=list)
    agents: list[_AgentModel] = Field(default_factory=list)  # sub-agents, called as tools
    routing: dict[str, str] = Field(default_factory=dict)  # agent ("main": the top) -> tier
    mcp_servers: dict[str, mcp.McpServerModel] = Field(default_factory=dict)

    @field_validator("setup", "requirements", "tools", "allow_hosts", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


@dataclass(frozen=True)
class Agent:
    """A sub-agent: the caller sees a tool ``name`` (one ``input`` string argument); calling it
    runs a loop of its own with ``system``, ``prompt`` (``{input}`` filled in), ``tools``
    (built-in tools), the sub-agents it may call (``agents``) and its own ``limits``."""

    name: str
    description: str
    system: str
    prompt: str
    tools: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    tier: str | None = None
    limits: Limits = field(default_factory=Limits)
    finish_tool: bool = True
    script: tuple[ScriptTurn, ...] = ()

    def render(self, text: str) -> str:
        """The prompt with the caller's input in place of ``{input}`` (nothing else expands)."""
        return self.prompt.replace("{input}", text)


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


def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, bool]:
    """Walk the composed YAML tree along a pydantic error location; (node, reached the end)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == part:
                    nxt = v
                    break
            if nxt is None:
                return node, False
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node, False
            node = node.value[part]
        else:
            return node, False
    return node, True


def _key_line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Line of the key (or item) that a location names; for a missing key, its parent's line."""
    if not loc:
        return None
    parent, found = _node_at(root, loc[:-1])
    if found and isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if k.value == loc[-1]:
                return int(k.start_mark.line) + 1
    node, _ = _node_at(root, loc)
    return int(node.start_mark.line) + 1 if node is not None else None


def field_name(loc: tuple[Any, ...]) -> str:
    """A validation error's location as a task file names it: ``script[0].tool_calls[1].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problem(exc: ValidationError) -> str:
    """The first problem of a validation error in a task file's words, and how many more."""
    err = exc.errors()[0]
    msg = {"extra_forbidden": "unknown field", "missing": "required field is missing"}.get(
        err["type"], err["msg"]
    )
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return msg


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
                line=_key_line(root, ("workspace",)),
                field="workspace",
            )
    servers = _mcp_servers(m, root, path)
    if known_tools is not None:
        _check_tools(m, root, path, known_tools | {a.name for a in m.agents})
    agents = _agents(m, root, path, known_tools)
    try:
        tiers = parse_tiers({"tiers": m.tiers}, path) if m.tiers else {}
    except TierFileError as exc:
        raise TaskFileError(
            path, exc.message.split(": ", 1)[-1], line=_key_line(root, ("tiers",)), field=exc.field
        ) from None
    for i, req in enumerate(m.requirements):
        why = requirement_problem(req)
        if why is not None:
            raise TaskFileError(
                path, why, line=_key_line(root, ("requirements", i)), field=f"requirements[{i}]"
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
        tier_line=_key_line(root, ("tier",)) if m.tier is not None else None,
        tiers=tiers,
        success_command=m.success.command,
        success_text=m.success.expect_text,
        script=tuple(ScriptTurn.from_dict(t.model_dump()) for t in m.script),
        agents=agents,
        routing=dict(m.routing),
        mcp_servers=servers,
    )


def _agents(
    m: _TaskModel, root: yaml.Node | None, path: Path, known_tools: set[str] | None
) -> tuple[Agent, ...]:
    """The sub-agents, checked: names unique and not a built-in tool's, tools and sub-agents
    known, no cycle, no chain deeper than ``limits.max_agent_depth``, routing names known."""
    names = [a.name for a in m.agents]
    builtin = known_tools or set()

    def fail(loc: tuple[Any, ...], why: str) -> TaskFileError:
        return TaskFileError(path, why, line=_key_line(root, loc), field=field_name(loc))

    for i, a in enumerate(m.agents):
        if a.name in builtin or a.name in (MAIN_AGENT, "finish"):
            raise fail(("agents", i, "name"), f"agent name '{a.name}' is taken by a tool")
        if names.index(a.name) != i:
            raise fail(("agents", i, "name"), f"a second agent named '{a.name}'")
        for j, t in enumerate(a.tools):
            if known_tools is not None and t not in known_tools and t not in names:
                raise fail(("agents", i, "tools", j), f"unknown tool '{t}'")
        for j, sub in enumerate(a.agents):
            if sub not in names:
                raise fail(("agents", i, "agents", j), f"unknown agent '{sub}'")
    calls = {a.name: [t for t in (*a.tools, *a.agents) if t in names] for a in m.agents}
    top = [t for t in m.tools if t in names]
    limit = m.limits.max_agent_depth

    loop = _cycle(calls)
    if loop:
        raise fail(
            ("agents", names.index(loop[0]), "agents"), f"a cycle of agents: {' -> '.join(loop)}"
        )

    def walk(name: str, chain: tuple[str, ...]) -> None:
        if len(chain) + 1 > limit:
            raise fail(
                ("agents", names.index(name), "name"),
                f"agent '{name}' is called at depth {len(chain) + 1} "
                f"({' -> '.join((MAIN_AGENT, *chain, name))}), past limits.max_agent_depth "
                f"= {limit}",
            )
        for sub in calls[name]:
            walk(sub, (*chain, name))

    for name in top:
        walk(name, ())
    known_agents = {MAIN_AGENT, *names}
    for agent in m.routing:
        if agent not in known_agents:
            raise fail(
                ("routing", agent),
                f"unknown agent '{agent}' (known: {', '.join(sorted(known_agents))})",
            )
    return tuple(
        Agent(
            name=a.name,
            description=a.description,
            system=a.system,
            prompt=a.prompt,
            tools=tuple(t for t in a.tools if t not in names),
            agents=tuple(dict.fromkeys(calls[a.name])),
            tier=a.tier,
            limits=Limits(**a.limits.model_dump()),
            finish_tool=a.finish_tool,
            script=tuple(ScriptTurn.from_dict(t.model_dump()) for t in a.script),
        )
        for a in m.agents
    )


def _cycle(calls: dict[str, list[str]]) -> list[str] | None:
    """A loop of agents calling agents (``[a, b, a]``), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for sub in calls.get(name, []):
            found = visit(sub, [*path, name])
            if found:
                return found
        done.add(name)
        return None

    for name in calls:
        found = visit(name, [])
        if found:
            return found
    return None


def _mcp_servers(m: _TaskModel, root: yaml.Node | None, path: Path) -> tuple[McpServer, ...]:
    """The task's MCP servers, each checked (:mod:`agentloop.config.mcp`)."""
    for name, server in m.mcp_servers.items():
        bad = mcp.problem(name, server)
        if bad is not None:
            where = ("mcp_servers", name, *((bad[0].split("[")[0],) if bad[0] else ()))
            raise TaskFileError(
                path,
                bad[1],
                line=_key_line(root, where),
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
    _refuse_twice(root, path)
    try:
        return root, _TaskModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        while (
            loc
            and not _node_at(root, loc)[1]
            and err["type"] != "missing"
            and err["type"] != "extra_forbidden"
        ):
            loc = loc[:-1]  # drop pydantic's union-branch tags, which are not YAML keys
        raise TaskFileError(
            path, problem(exc), line=_key_line(root, loc), field=field_name(loc)
        ) from None


def _refuse_twice(node: yaml.Node | None, path: Path, at: str = "") -> None:
    """A key written twice in one mapping is refused naming both lines (YAML keeps the last
    silently: ``name: x`` ... ``name: y`` would run as ``y``)."""
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_twice(item, path, f"{at}[{i}]")
    if not isinstance(node, yaml.MappingNode):
        return
    first: dict[object, int] = {}
    for k, v in node.value:
        line = int(k.start_mark.line) + 1
        name = f"{at}.{k.value}" if at else str(k.value)
        if isinstance(k, yaml.ScalarNode) and k.value in first:
            raise TaskFileError(
                path,
                f"'{k.value}' is written twice: on line {first[k.value]} and on line {line} "
                "(keep one)",
                line=line,
                field=name,
            )
        if isinstance(k, yaml.ScalarNode):
            first[k.value] = line
        _refuse_twice(v, path, name)


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
                    line=_key_line(root, ("tools", i)),
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
                line=_key_line(root, ("tools", i)),
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
                    line=_key_line(root, ("script", i, "tool_calls", j, "name")),
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
