"""The simulator's prompt cache: how many input tokens of a request a real server would have cached.

An agent's every request repeats its previous one (system prompt, user turn, earlier model turns
and tool outputs) and appends the newest items; servers with prompt caching (llama.cpp's slot
cache, vLLM's prefix cache, OpenAI's prompt caching) prefill only what is new. The simulator
reports the same: a request's ``cached_tokens`` are the input tokens of its longest run of
leading conversation items (Responses: ``instructions`` counts as the first item) that an earlier
request of the same model already sent in the same order. Matching is by whole items (their
JSON, keys sorted), so an edited earlier message ends the cached prefix there.

Kept per model, bounded (oldest prefixes forgotten first), O(items) per request. The speed model
(:mod:`agentloop.model.speed`) then charges cached tokens at ``cached_prefill_tps`` (free by default).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

MAX_PREFIXES = 200_000  # remembered prefixes over all models (about 20 MB at most)


def _digest(item: Any) -> bytes:
    return hashlib.blake2b(orjson.dumps(item, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


class PrefixCache:
    """Which leading items of a conversation were sent before (per model)."""

    def __init__(self, max_prefixes: int = MAX_PREFIXES) -> None:
        self._seen: dict[bytes, None] = {}
        self._max = max_prefixes

    def __len__(self) -> int:
        return len(self._seen)

    def lookup_and_store(self, model: str, items: list[Any], tokens: list[int]) -> int:
        """Cached input tokens of a request whose conversation is ``items`` (``tokens``: each
        item's input tokens); the request's own prefixes are remembered for later ones."""
        h = hashlib.blake2b(model.encode(), digest_size=16).digest()
        cached, hit = 0, True
        seen = self._seen
        for item, n in zip(items, tokens, strict=True):
            h = hashlib.blake2b(h + _digest(item), digest_size=16).digest()
            if hit and h in seen:
                cached += n
            else:
                hit = False
                seen[h] = None
        while len(seen) > self._max:  # forget the oldest prefixes
            del seen[next(iter(seen))]
        return cached


def request_items(api: str, body: dict[str, Any]) -> list[Any]:
    """The conversation items of a request body, in the order the token counts list them
    (:func:`agentloop.model.tokens.chat_item_tokens` / ``responses_item_tokens``)."""
    if api == "chat":
        return list(body.get("messages") or [])
    items = body.get("input") or []
    head = [{"instructions": body["instructions"]}] if body.get("instructions") else []
    return [*head, items] if isinstance(items, str) else [*head, *items]
