"""The one redactor for everything shown or written (trace, logs, terminal), and the one truncator.

:class:`Redactor` knows the secret values it holds (the values of environment variables named
like secrets) in the forms a command can turn them into: verbatim, base64 (standard and URL-safe,
at any of the three byte alignments, so a secret inside a longer encoded text is found too),
hex (either case), reversed, and URL-encoded. Besides those it hides bearer tokens, ``sk-``
keys, the password of a URL (``scheme://user:PASSWORD@host``) and the value of any
``NAME=value`` / ``NAME: value`` whose name looks secret. One instance serves the trace pipeline,
the log processor and the terminal's progress lines (:meth:`Redactor.text`); the model client
and ``agentloop tiers`` hide the tier's key with it, and a tier's extra header values are shown
as :data:`REDACTED` too: one marker everywhere. :data:`SECRET_NAME` is also what keeps a
variable out of a command's environment (the sandbox), and :func:`looks_like_key` what refuses
a key written where a variable's name belongs (a tier file).
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, quote_plus

Processor = Callable[[dict[str, Any]], dict[str, Any]]

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}")
_SK = re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}")
REDACTED = "[REDACTED]"  # the one marker: every hidden secret, wherever it is shown
MIN_SECRET = 6  # shorter values are not worth hiding (and would blot out ordinary words)


# the prefixes of API keys as providers issue them (OpenAI, Groq, Cerebras, xAI, Hugging Face,
# GitHub, Stripe-style pk/rk, Google's AIza)
_KEY_PREFIX = re.compile(r"(?i)^(sk|gsk|csk|xai|hf|ghp|github_pat|pk|rk|key)[-_]|^AIza")


def looks_like_key(value: str) -> bool:
    """Whether ``value`` (meant to name an environment variable) looks like an API key itself."""
    v = value.strip()
    if _KEY_PREFIX.search(v):
        return True
    return (
        len(v) >= 20
        and re.search(r"[a-z]", v) is not None
        and re.search(r"\d", v) is not None
        and not re.fullmatch(r"[A-Z0-9_]+", v)
    )


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret (long enough to be worth hiding)."""
    env = os.environ if environ is None else environ
    return sorted(
        {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET},
        key=len,
        reverse=True,
    )


_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/?#@]*:)([^\s@/?#]+)(@)")
# NAME=value where NAME ends in a secret word (max_tokens=... is not one: plural)
_NAMED_VALUE = re.compile(
    r"(?i)\b([A-Z0-9_.\-]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)"
    r"\b[\"']?\s*[=:]\s*[\"']?)([^\s\"',;&]{6,})"
)


# literal cheap tests that every match of a pattern passes: a text failing them skips that
# pattern's substitution (most strings of a trace fail all, and a suite writes tens of thousands
# of records a second at its peak)
_NAMED_WORDS = ("key", "token", "secret", "passw", "credential")


def _base64_cores(raw: bytes) -> list[str]:
    """The base64 text that encodes ``raw`` at each of the three alignments, whatever surrounds it."""
    out = []
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            enc = encode(b"\0" * shift + raw).decode("ascii")
            start = -(-8 * shift // 6)  # first char made of the secret's bits only
            end = (8 * (shift + len(raw))) // 6  # one past the last such char
            core = enc[start:end]
            if len(core) >= MIN_SECRET:
                out.append(core)
    return out


def variants(secret: str) -> set[str]:
    """Every form of ``secret`` the redactor hides."""
    raw = secret.encode("utf-8")
    found = {
        secret,
        secret[::-1],
        raw.hex(),
        raw.hex().upper(),
        quote(secret, safe=""),
        quote_plus(secret),
        *_base64_cores(raw),
    }
    return {v for v in found if len(v) >= MIN_SECRET}


class Redactor:
    """Hides known secret values (in their common encodings) and secret-shaped text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        needles = sorted(
            {v for s in secrets if len(s) >= MIN_SECRET for v in variants(s)}, key=len, reverse=True
        )  # longest first: a value inside another
        self._needles = tuple(needles)
        self._known = re.compile("|".join(map(re.escape, needles))) if needles else None

    def text(self, text: str) -> str:
        """``text`` with every secret in it replaced by ``[REDACTED]``."""
        if len(text) < MIN_SECRET:  # shorter than anything a pattern or a known secret matches
            return text
        # `in` finds a literal ~100x faster than a regex alternation scans for it
        if self._known is not None and any(n in text for n in self._needles):
            text = self._known.sub(REDACTED, text)
        low = text.lower()
        if not text.isascii():  # the two letters (?i) matches to i and s that lower() keeps
            low = low.replace("\u0131", "i").replace("\u017f", "s")
        if "://" in low:
            text = _URL_PASSWORD.sub(r"\1" + REDACTED + r"\3", text)
        if ("=" in text or ":" in text) and any(w in low for w in _NAMED_WORDS):
            text = _NAMED_VALUE.sub(r"\1" + REDACTED, text)
        if "bearer" in low:
            text = _BEARER.sub(r"\1" + REDACTED, text)
        return _SK.sub(REDACTED, text) if "sk-" in text else text

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        """A trace record with every string in it redacted (a pipeline processor)."""
        out: dict[str, Any] = _map_strings(record, self.text, ("authorization", "api_key"))
        return out


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` redacted against ``secrets`` (build a :class:`Redactor` once for many texts)."""
    return Redactor(secrets).text(text)


# values with no string inside: kept as they are
_LEAVES = frozenset({int, float, bool, type(None)})


def _map_strings(obj: Any, fn: Callable[[str], str], hide_keys: tuple[str, ...] = ()) -> Any:
    """``obj`` with ``fn`` applied to every string inside it (values of ``hide_keys`` hidden)."""
    kind = type(obj)
    if kind is str:
        return fn(obj)
    if kind in _LEAVES:
        return obj
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():  # the common leaves inline: a trace writes thousands a second
            if hide_keys and isinstance(k, str) and k.lower() in hide_keys:
                out[k] = REDACTED
            elif type(v) is str:
                out[k] = fn(v)
            elif type(v) in _LEAVES:
                out[k] = v
            else:
                out[k] = _map_strings(v, fn, hide_keys)
        return out
    if isinstance(obj, list | tuple):
        return [_map_strings(v, fn, hide_keys) for v in obj]
    if isinstance(obj, str):  # a str subclass
        return fn(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # as orjson would write it (a dict of its fields), so a value carried in a dataclass
        # (an event's tool calls, say) is redacted like any other, never printed around the walk
        return _map_strings(dataclasses.asdict(obj), fn, hide_keys)
    return obj


def redactor(secrets: Iterable[str] | None = None) -> Redactor:
    """The redactor for ``secrets`` (default: this process's secret-named environment values)."""
    return Redactor(secret_values() if secrets is None else secrets)


NOTE_CHARS = 160  # room kept for the note that says what was cut


def cut_middle(head: str, tail: str, note: str) -> str:
    """``head``, then ``note`` (what was cut) on a line of its own, then ``tail``: the one shape
    of a cut text, for a text in hand (:func:`clip`) or a stream kept as head and tail."""
    return f"{head}\n[... {note} ...]\n{tail}"


def clip(
    text: str, cap: int, *, what: str = "output", head_share: float = 0.4, kind: str = "output"
) -> str:
    """``text`` in at most ``cap`` chars: head and tail kept, the cut stated in the middle (the
    one truncator: tool output fed to the model, and trace strings)."""
    if len(text) <= cap:
        return text
    keep = max(0, cap - NOTE_CHARS)
    head = int(keep * head_share)
    tail = keep - head
    cut = len(text) - head - tail
    return cut_middle(
        text[:head],
        text[len(text) - tail :] if tail else "",
        f"{cut:,} chars cut from the middle of {what} ({len(text):,} chars in all); "
        f"{kind} capped at {cap:,} chars",
    )


def truncator(max_chars: int) -> Processor:
    """Cut any string longer than ``max_chars`` (:func:`clip`), saying how much was cut."""

    def cut(s: str) -> str:
        return s if len(s) <= max_chars else clip(s, max_chars, what="a string", kind="a string")

    def process(record: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = _map_strings(record, cut)
        return out

    return process
