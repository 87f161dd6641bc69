"""Where a fault is in a tiers (TOML) file: its text read as UTF-8, a tier's line, a key twice."""

from __future__ import annotations

import re
from pathlib import Path

from agentloop.errors import TierFileError


def line_of(text: str, tier: str, key: str | None) -> int | None:
    """Best-effort line of ``[tiers.tier]`` (and of ``key`` inside it) for error messages."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\s*tiers\.\"?" + re.escape(tier) + r"\"?\s*\]")
    for i, line in enumerate(lines):
        if header.match(line):
            if key is None:
                return i + 1
            for j in range(i + 1, len(lines)):
                if lines[j].lstrip().startswith("["):
                    break
                if re.match(r"^\s*" + re.escape(key) + r"\s*=", lines[j]):
                    return j + 1
            return i + 1
    return None


def read_text(path: Path) -> str:
    """A tiers file's text; unreadable or not UTF-8 is a TierFileError naming file and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TierFileError(path, f"cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TierFileError(
            path,
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
            f"{col}); save the file as UTF-8",
            line=line,
        ) from None


def written_twice(text: str, line: int) -> tuple[str, int] | None:
    """When ``line`` repeats a key or a table header written earlier in its table (tomllib
    refuses both, naming only the second line): that key and the line of its first writing."""
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return None
    here = lines[line - 1].strip()
    if here.startswith("["):
        for i in range(line - 1):
            if lines[i].strip().split("#")[0].strip() == here.split("#")[0].strip():
                return here.split("#")[0].strip(), i + 1
        return None
    m = re.match(r"^\s*([A-Za-z0-9_.\"'-]+?)\s*=", lines[line - 1])
    if m is None:
        return None
    key = m.group(1)
    for i in range(line - 2, -1, -1):  # back to this table's header
        if lines[i].lstrip().startswith("["):
            break
        if re.match(r"^\s*" + re.escape(key) + r"\s*=", lines[i]):
            return key, i + 1
    return None
