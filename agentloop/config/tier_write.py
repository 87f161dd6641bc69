"""A measured speed profile written back into a tiers file, everything else in the file kept."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from agentloop.config.tier_text import line_of, read_text
from agentloop.config.tiers import parse_tiers, profile_dict
from agentloop.errors import TierFileError
from agentloop.model.speed import SpeedProfile


def _fmt_number(x: float) -> str:
    """Short, TOML-valid: integers without a fraction, others to 4 significant digits."""
    if x == int(x) and abs(x) >= 1:
        return str(int(x))
    return f"{x:.4g}" if "e" not in f"{x:.4g}" else f"{x:.6f}"


def _profile_values(profile: SpeedProfile) -> list[tuple[str, str]]:
    """The profile's fields as a tiers file writes them (rounded, optional ones when set)."""
    digits = {"base_latency_s": 3, "output_tps": 1, "tpot_ms_per_1k": 3, "prefill_ms_per_1k": 3}
    return [
        (k, _fmt_number(round(v, digits.get(k, 0))))
        for k, v in profile_dict(profile).items()
        if isinstance(v, int | float)  # every value is one (a TypedDict types its items object)
    ]


def profile_line(profile: SpeedProfile) -> str:
    """The inline ``profile = {...}`` line of a tiers file for ``profile``."""
    return "profile = { " + ", ".join(f"{k} = {v}" for k, v in _profile_values(profile)) + " }"


def write_profile(path: Path, name: str, profile: SpeedProfile) -> None:
    """Rewrite tier ``name``'s profile in the tiers file at ``path``, keeping everything else.

    Handles the inline form (``profile = { ... }`` inside ``[tiers.NAME]``) and the sub-table
    form (``[tiers.NAME.profile]``); the result is validated before the file is replaced.
    """
    text = read_text(path)
    lines = text.splitlines(keepends=True)
    start = line_of(text, name, None)
    if start is None:
        raise TierFileError(
            path, f"no [tiers.{name}] table to write a profile into", field=f"tiers.{name}"
        )
    sub = re.compile(r"^\s*\[\s*tiers\.\"?" + re.escape(name) + r"\"?\.profile\s*\]")
    end = next(
        (j for j in range(start, len(lines)) if lines[j].lstrip().startswith("[")), len(lines)
    )
    new = profile_line(profile) + "\n"
    for j in range(start, end):
        if re.match(r"^\s*profile\s*=", lines[j]):
            lines[j] = new
            break
    else:
        k = next((j for j, line in enumerate(lines) if sub.match(line)), None)
        if k is None:
            lines.insert(end, new)
        else:  # sub-table: its keys replaced by the profile's, other lines kept
            stop = next(
                (j for j in range(k + 1, len(lines)) if lines[j].lstrip().startswith("[")),
                len(lines),
            )
            key = re.compile(r"^\s*(" + "|".join(SpeedProfile.__slots__) + r")\s*=")
            body = [line for line in lines[k + 1 : stop] if not key.match(line)]
            lines[k + 1 : stop] = [f"{n} = {v}\n" for n, v in _profile_values(profile)] + body
    out = "".join(lines)
    parse_tiers(tomllib.loads(out), path, out)  # never write a file we could not read back
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(out, encoding="utf-8")
    tmp.replace(path)
