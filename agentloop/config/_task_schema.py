"""A task file's schema: the pydantic models its YAML mapping is checked against.

Untrusted text in: unknown keys refused everywhere, every count positive, a limit's default read
from its one owner (:mod:`agentloop.config.limits`); :mod:`agentloop.config.tasks` turns a checked
mapping into a :class:`~agentloop.config.tasks.Task`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentloop.config import mcp
from agentloop.config.limits import Limits


class _ToolCallModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class _TurnModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    reasoning_tokens: int = Field(default=0, ge=0)
    tool_calls: list[_ToolCallModel] = Field(default_factory=list)


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
