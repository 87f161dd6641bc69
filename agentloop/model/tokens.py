"""The simulator's deterministic token counting: how text splits into tokens, what a request costs.

A token is one of, scanning left to right (``TOKEN_RE``):

- a run of word characters (letters, digits, underscore) with at most one leading space,
  e.g. ``" hello"``, ``"42"``;
- one punctuation mark or symbol, with at most one leading space, e.g. ``","``, ``" {"``;
- one newline ``"\\n"``;
- a run of other whitespace (spaces, tabs, ``\\r``) not absorbed by the word after it: in
  ``"a   b"`` the tokens are ``"a"``, ``"  "``, ``" b"``.

Every character belongs to exactly one token, so ``"".join(split_tokens(s)) == s`` always; the
simulator streams exactly these pieces (or runs of them), so streamed deltas concatenate to the
scripted text and arguments.

Input tokens of a request (``chat_input_tokens`` / ``responses_input_tokens``): the tokens of
every message's text, of every tool call's name and arguments, of every tool output, plus
``MESSAGE_OVERHEAD`` per conversation item (role and framing). Tool definitions are not counted.
Output tokens are the reasoning tokens of the turn plus its visible tokens: the text's tokens and
each tool call's argument tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

TOKEN_RE = re.compile(r" ?\w+| ?[^\w\s]|\n|[^\S\n]+?(?= ?[^\s])|[^\S\n]+")
MESSAGE_OVERHEAD = 4  # tokens per conversation item for its role and framing

_findall = TOKEN_RE.findall


def split_tokens(text: str) -> list[str]:
    """The tokens of ``text``, in order; they concatenate back to ``text``."""
    return _findall(text)


def count_tokens(text: str) -> int:
    """How many tokens ``text`` holds."""
    return len(_findall(text)) if text else 0


class TokenCache:
    """``count_tokens`` remembering the counts of texts it has seen: an agent resends its whole
    conversation every step, so without this each request re-tokenizes every earlier message
    (about 25 MB/s, blocking the event loop that paces every other stream)."""

    def __init__(self, max_entries: int = 8192, min_chars: int = 64) -> None:
        self._counts: dict[str, int] = {}
        self._max, self._min = max_entries, min_chars

    def __len__(self) -> int:
        return len(self._counts)

    def count(self, text: str) -> int:
        if len(text) < self._min:
            return count_tokens(text)
        n = self._counts.get(text)
        if n is None:
            if len(self._counts) >= self._max:
                self._counts.clear()
            n = self._counts[text] = count_tokens(text)
        return n


def _content_text(content: Any) -> str:
    """The text of a message content: a string, or a list of parts carrying ``text``/``output``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
        return "".join(parts)
    return ""


def chat_item_tokens(
    messages: list[dict[str, Any]], count: Callable[[str], int] = count_tokens
) -> list[int]:
    """Input tokens of each message of a Chat Completions ``messages`` list."""
    out = []
    for m in messages:
        n = MESSAGE_OVERHEAD + count(_content_text(m.get("content")))
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            n += count(fn.get("name") or "") + count(fn.get("arguments") or "")
        out.append(n)
    return out


def chat_input_tokens(
    messages: list[dict[str, Any]], count: Callable[[str], int] = count_tokens
) -> int:
    """Input tokens of a Chat Completions ``messages`` list."""
    return sum(chat_item_tokens(messages, count))


def responses_item_tokens(
    instructions: str | None,
    items: str | list[dict[str, Any]],
    count: Callable[[str], int] = count_tokens,
) -> list[int]:
    """Input tokens of each part of a Responses request: ``instructions`` (when given) first,
    then each ``input`` item (a string input is one item; reasoning items cost nothing)."""
    out = [MESSAGE_OVERHEAD + count(instructions)] if instructions else []
    if isinstance(items, str):
        return [*out, MESSAGE_OVERHEAD + count(items)]
    for it in items:
        kind = it.get("type", "message")
        if kind == "reasoning":
            out.append(0)
            continue
        n = MESSAGE_OVERHEAD
        if kind == "message":
            n += count(_content_text(it.get("content")))
        elif kind == "function_call":
            n += count(it.get("name") or "") + count(it.get("arguments") or "")
        elif kind == "function_call_output":
            n += count(_content_text(it.get("output")))
        out.append(n)
    return out


def responses_input_tokens(
    instructions: str | None,
    items: str | list[dict[str, Any]],
    count: Callable[[str], int] = count_tokens,
) -> int:
    """Input tokens of a Responses request: ``instructions`` plus its ``input`` items."""
    return sum(responses_item_tokens(instructions, items, count))
