"""Model tiers: endpoint, model, API flavour, request options and speed profile, from TOML."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from agentloop.config._tier_schema import RESERVED_BODY_KEYS as RESERVED_BODY_KEYS
from agentloop.config._tier_schema import SIM as SIM
from agentloop.config._tier_schema import TierModel
from agentloop.config.tier_text import line_of, read_text, written_twice
from agentloop.errors import ConfigError, TierFileError
from agentloop.model.local import LocalSpec
from agentloop.model.prices import Prices
from agentloop.model.speed import (
    SpeedProfile as SpeedProfile,  # THE speed model: agentloop.model.speed
)
from agentloop.redact import REDACTED
from agentloop.trace.header import ProfileRecord, TierRecord


@dataclass(frozen=True, slots=True)
class Tier:
    """One model tier. ``api_key_env`` names an environment variable; the key is never stored."""

    name: str
    base_url: str
    model: str
    api: Literal["responses", "chat"]
    profile: SpeedProfile | None  # None: not measured yet (`agentloop probe --tier NAME --write`)
    api_key_env: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    stall_timeout_s: float = 30.0  # longest silence in a stream before the attempt is retried
    max_attempts: int = 4  # tries per model call, the first included
    prices: Prices | None = None  # USD per million tokens (agentloop/model/prices.py)
    context_window: int | None = None  # tokens per request; the runner trims to stay under it
    local: LocalSpec | None = None  # base_url "local": a llama-server agentloop starts itself
    # longest silence before the first token (agentloop/clients/_silence.py); None: from profile
    first_token_timeout_s: float | None = None

    @property
    def simulated(self) -> bool:
        return self.base_url == SIM

    def summary(self) -> TierRecord:
        """The tier as written into a trace header (no secrets: only the variable's name)."""
        out: TierRecord = {
            "name": self.name,
            "base_url": self.base_url,
            "model": self.model,
            "api": self.api,
            "api_key_env": self.api_key_env,
            "options": public_options(self.options),
            "stall_timeout_s": self.stall_timeout_s,
        }  # then one by one, in the order traces have always had
        if self.first_token_timeout_s is not None:
            out["first_token_timeout_s"] = self.first_token_timeout_s
        out["max_attempts"] = self.max_attempts
        out["profile"] = profile_dict(self.profile) if self.profile is not None else None
        out["prices"] = self.prices.summary() if self.prices is not None else None
        if self.context_window:
            out["context_window"] = self.context_window
        if self.local:
            out["local"] = {
                "model": self.local.model,
                "ctx_size": self.local.ctx_size,
                "threads": self.local.threads,
            }
        return out


def public_options(options: dict[str, Any]) -> dict[str, Any]:
    """A tier's options as traces and listings show them: extra header values redacted."""
    out = dict(options)
    if out.get("extra_headers"):
        out["extra_headers"] = dict.fromkeys(out["extra_headers"], REDACTED)
    return out


def parse_tiers(data: dict[str, Any], source: str | Path, text: str = "") -> dict[str, Tier]:
    """Validate the ``tiers`` table of a parsed TOML (or task-file) mapping."""
    table = data.get("tiers", {})
    if not isinstance(table, dict):
        raise TierFileError(source, "'tiers' must be a table of tiers", field="tiers")
    out: dict[str, Tier] = {}
    for name, raw in table.items():
        try:
            m = TierModel.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = [str(p) for p in err["loc"]]
            top = loc[0] if loc else None
            raise TierFileError(
                source,
                f"tier '{name}': {err['msg']}",
                line=line_of(text, name, top) if text else None,
                field=".".join(["tiers", name, *loc]),
            ) from None
        out[name] = Tier(
            name=name,
            base_url=m.base_url.rstrip("/"),
            model=m.model,
            api=m.api,
            api_key_env=m.api_key_env,
            stall_timeout_s=m.stall_timeout_s,
            first_token_timeout_s=m.first_token_timeout_s,
            max_attempts=m.max_attempts,
            options={k: v for k, v in m.options.model_dump().items() if v is not None},
            profile=None if m.profile is None else SpeedProfile(**m.profile.model_dump()),
            prices=None
            if m.prices is None
            else Prices(
                m.prices.input,
                m.prices.input if m.prices.cached_input is None else m.prices.cached_input,
                m.prices.output,
                m.prices.placeholder,
            ),
            context_window=m.context_window,
            local=None
            if m.local is None
            else LocalSpec(
                m.local.model,
                m.local.ctx_size,
                m.local.threads,
                m.local.seed,
                m.local.startup_timeout_s,
                tuple(m.local.args),
            ),
        )
    return out


def load_tiers_file(path: Path) -> dict[str, Tier]:
    """Read one tiers TOML file."""
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        line = int(m.group(1)) if m else None
        twice = written_twice(text, line) if line is not None else None
        if twice is not None:
            key, first = twice
            raise TierFileError(
                path, f"'{key}' is written twice: on line {first} and again here", line=line
            ) from None
        raise TierFileError(path, f"not valid TOML: {exc}", line=line) from None
    return parse_tiers(data, path, text)


# the built-in tiers: package data, so a wheel install has them (their one and only copy)
BUILTIN_TIERS = Path(__file__).resolve().parent / "tiers.toml"


def project_tiers_path() -> Path | None:
    """``./tiers.toml`` when the current folder has one (a project's own tiers)."""
    here = Path.cwd() / "tiers.toml"
    return here if here.is_file() and here.resolve() != BUILTIN_TIERS else None


def default_tiers_path() -> Path:
    """The file a tier's measured profile is written to: ``./tiers.toml``, else the built-in."""
    return project_tiers_path() or BUILTIN_TIERS


def tier_layers(
    path: Path | None = None,
    extra: dict[str, Tier] | None = None,
) -> list[tuple[str, dict[str, Tier]]]:
    """The tier layers, lowest first: built-in < ./tiers.toml < ``path`` < ``extra`` (a task's).

    Each is ``(where, tiers)``; a later layer's tier replaces an earlier one of the same name.
    """
    layers = [("built-in", load_tiers_file(BUILTIN_TIERS))]
    seen = {BUILTIN_TIERS}
    for p in (project_tiers_path(), Path(path) if path is not None else None):
        if p is not None and p.resolve() not in seen:
            seen.add(p.resolve())
            layers.append((str(p), load_tiers_file(p)))
    if extra:
        layers.append(("task", dict(extra)))
    return layers


def load_tiers(path: Path | None = None, extra: dict[str, Tier] | None = None) -> dict[str, Tier]:
    """Every tier, layered (:func:`tier_layers`): built-in, ./tiers.toml, ``path``, ``extra``."""
    tiers: dict[str, Tier] = {}
    for _, layer in tier_layers(path, extra):
        tiers.update(layer)
    return tiers


def tier_sources(
    path: Path | None = None,
    extra: dict[str, Tier] | None = None,
) -> dict[str, str]:
    """For each tier name, the layer its definition came from (``built-in``, a path, ``task``)."""
    return {name: where for where, layer in tier_layers(path, extra) for name in layer}


def no_profile(name: str, why: str = "to predict with") -> ConfigError:
    """The error for a tier without a speed profile: it says how to measure one."""
    return ConfigError(
        f"tier '{name}' has no speed profile {why}: measure one with "
        f"`agentloop probe --tier {name} --write`"
    )


def require_profile(tier: Tier, why: str = "to predict with") -> SpeedProfile:
    """The tier's speed profile; a tier without one is a ConfigError saying how to measure it."""
    if tier.profile is None:
        raise no_profile(tier.name, why)
    return tier.profile


def get_tier(
    tiers: dict[str, Tier],
    name: str,
    source: object = "tiers",
    *,
    line: int | None = None,
    field: str | None = None,
) -> Tier:
    """Look a tier up by name; an unknown name is blamed on ``source`` (where the name was
    written: ``--tier``, a task file and its ``line``), with a "did you mean" and the known ones."""
    try:
        return tiers[name]
    except KeyError:
        known = ", ".join(sorted(tiers)) or "none"
        close = difflib.get_close_matches(name, list(tiers), n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise TierFileError(
            source, f"unknown tier '{name}'{hint} (known tiers: {known})", line=line, field=field
        ) from None


def missing_key(tier: Tier) -> str | None:
    """The environment variable that should hold ``tier``'s API key, when it is not set."""
    key = tier.api_key_env
    if key is None or tier.simulated or tier.local is not None or os.environ.get(key):
        return None
    return key


def require_key(tier: Tier) -> None:
    """Refuse (ConfigError, exit 2) a tier whose API key variable is not set, before a run
    starts: otherwise the run would spend its set-up and end at its first model call."""
    key = missing_key(tier)
    if key is not None:
        raise ConfigError(
            f"tier '{tier.name}' reads its API key from the environment variable {key}, "
            f"which is not set: export {key}=... first, or pick another tier with --tier"
        )


def faster_tier(trace: Any, tiers: dict[str, Tier] | None) -> Tier | None:
    """The fastest tier (output tok/s) faster than the run's; a tie goes to the same kind
    (simulated or not) as the run's tier, then to the name. ``trace``: a loaded trace (its
    recorded tier's profile and kind are read), the headline's "the tiers you have" (issue 24)."""
    recorded = trace.run.tier
    own_tps = recorded.profile.output_tps if recorded.profile is not None else 0.0
    simulated = recorded.simulated
    faster = [
        t
        for t in (tiers or {}).values()
        if t.profile is not None and t.profile.output_tps > own_tps
    ]
    if not own_tps or not faster:
        return None
    return max(
        sorted(faster, key=lambda t: t.name),  # max keeps the first of equals
        key=lambda t: (t.profile.output_tps if t.profile else 0, t.simulated == simulated),
    )


def profile_dict(profile: SpeedProfile) -> ProfileRecord:
    """The profile as a trace header / JSON writes it; the optional speed-model fields only
    when set, so old readers see the three fields they know."""
    out: ProfileRecord = {
        "base_latency_s": profile.base_latency_s,
        "prefill_tps": profile.prefill_tps,
        "output_tps": profile.output_tps,
    }
    if profile.cached_prefill_tps is not None:
        out["cached_prefill_tps"] = profile.cached_prefill_tps
    if profile.tpot_ms_per_1k:
        out["tpot_ms_per_1k"] = profile.tpot_ms_per_1k
    if profile.prefill_ms_per_1k:
        out["prefill_ms_per_1k"] = profile.prefill_ms_per_1k
    return out
