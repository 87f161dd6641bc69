"""Answering one model call: refuse -> plan -> pace -> write, for one base URL's script.

An :class:`Answers` is what one base URL serves: the simulator's own (``/v1``), or one route's
(``/r/<key>/v1``, :meth:`agentloop.sim.server.SimServer.route`). It holds the script (or the
filler), the speed profiles, the faults and its own request count; the server's one
:class:`~agentloop.sim.pacer.Pacer` and tokenizer are passed in, so every route writes within
the same budget. :meth:`Answers.answer` takes a call through its four steps: *refuse* (a fault,
a body that is not JSON, ``previous_response_id``, reasoning items not passed back, a
conversation that does not fit the script), *plan* (the turn, cut to the request's output
limit, its cached prefix and its deadlines from THE speed model), *pace* and *write* (the
pacer, streamed or whole, in-stream faults applied).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentloop.errors import ConfigError
from agentloop.model.speed import CallParts, SpeedProfile
from agentloop.model.tokens import TokenCache, chat_item_tokens, responses_item_tokens
from agentloop.script import ScriptTurn
from agentloop.sim import _chat, _http, _responses
from agentloop.sim._stream import Schedule, StreamPlan, make_schedule
from agentloop.sim.cache import PrefixCache, request_items
from agentloop.sim.conversation import (
    Call,
    ScriptMismatch,
    TurnPlan,
    chat_priors,
    filler_turn,
    pick_turn,
    plan_turn,
    responses_priors,
    truncate,
)
from agentloop.sim.faults import (
    Fault,
    Headers,
    bad_gzip,
    firing,
    in_stream,
    refuse,
    wants_bad_gzip,
)
from agentloop.sim.pacer import Pacer

DEFAULT_MODEL = "sim"
DEFAULT_FILLER = 16  # tokens per answer when neither a script nor filler_tokens is given


@dataclass(frozen=True, slots=True)
class Refusal:
    """An error reply instead of a turn (OpenAI's error shape)."""

    status: int
    message: str
    code: str

    def write(self, writer: asyncio.StreamWriter, req: _http.Request, extra: Headers) -> bool:
        body = _http.error_body(self.message, "invalid_request_error", self.code)
        writer.write(_http.json_response(self.status, body, req.keep_alive, extra))
        return True


@dataclass(frozen=True, slots=True)
class Planned:
    """A turn ready to write: the call, its time split and its deadlines."""

    call: Call
    parts: CallParts
    sched: Schedule


class Answers:
    """The script, profiles and faults one base URL answers with, and what it has counted."""

    def __init__(
        self,
        profile: SpeedProfile,
        script: Sequence[ScriptTurn] | None = None,
        filler_tokens: int | None = None,
        *,
        profiles: dict[str, SpeedProfile] | None = None,
        faults: Iterable[Fault] = (),
        jitter: float = 0.0,
        seed: int = 0,
        dialect: str | Iterable[str] = (),
        require_reasoning: bool = False,
    ) -> None:
        if profile.output_tps <= 0:
            raise ConfigError("simulator profile: output_tps must be > 0")
        self.profile = profile
        self.profiles = dict(profiles or {})
        self.plans = None if script is None else [plan_turn(i, t) for i, t in enumerate(script)]
        filler = DEFAULT_FILLER if filler_tokens is None else filler_tokens
        self.filler = None if script is not None else plan_turn(0, filler_turn(filler, seed))
        self.faults = tuple(faults)
        self.jitter = float(jitter)
        self.seed = seed
        self.dialect = _chat.parse_dialect(dialect)  # Chat quirks of real servers (see _chat)
        self.require_reasoning = require_reasoning  # strict: 400 when reasoning is not passed back
        self.requests = 0  # model requests so far (their 1-based numbers are what faults name)
        self.reasoning_received = 0  # reasoning items clients passed back (and we recognised)
        self.reasoning_missing = 0  # requests that dropped an earlier turn's reasoning item
        self.prefixes = PrefixCache()  # cached_tokens of repeated conversation prefixes

    async def answer(
        self,
        req: _http.Request,
        writer: asyncio.StreamWriter,
        api: str,
        pacer: Pacer,
        tokens: TokenCache,
    ) -> bool:
        """Answer one model call (``api``: "responses" or "chat"); whether the connection
        lives on."""
        t0 = asyncio.get_running_loop().time()
        self.requests += 1
        number = self.requests
        fired = firing(self.faults, number)
        rid = [("x-request-id", f"req_sim{number:06d}")]
        # refuse: a fault, then the body, then a conversation that does not fit the script
        early = refuse(writer, req, fired, rid)
        if early is not None:
            return early
        body = self._body(req, api)
        if isinstance(body, Refusal):
            return body.write(writer, req, rid)
        try:
            turn = self._turn_for(api, body, tokens)
        except ScriptMismatch as exc:
            return Refusal(400, f"agentloop sim: {exc}", "script_mismatch").write(writer, req, rid)
        except (AttributeError, TypeError) as exc:
            why = f"Malformed {api} request body: {exc}"
            return Refusal(400, why, "invalid_request").write(writer, req, rid)
        # plan: the turn cut to its limit, its cached prefix, its deadlines
        planned = self._plan(t0, number, api, body, *turn)
        if wants_bad_gzip(fired):  # planned first: the prompt cache has seen the request
            return bad_gzip(writer, req, bool(body.get("stream")), rid)
        # pace and write: whole when the last token is due, or streamed token by token
        call, sched, during = planned.call, planned.sched, in_stream(fired)
        if not body.get("stream"):
            whole = (_chat if api == "chat" else _responses).final_json(call, body)
            return await pacer.whole(
                writer, req, whole, sched, call.plan.visible_tokens, during, rid
            )
        plan = self._stream_plan(api, body, planned)
        return await pacer.stream(writer, req, plan, sched, during, rid)

    # ---- refuse ------------------------------------------------------------------------------

    def _body(self, req: _http.Request, api: str) -> dict[str, Any] | Refusal:
        """The request's JSON body, or why it is refused before its turn is looked for."""
        try:
            body = orjson.loads(req.body)
            if not isinstance(body, dict):
                raise TypeError
        except (orjson.JSONDecodeError, TypeError):
            return Refusal(400, "The request body is not a JSON object.", "invalid_json")
        if body.get("previous_response_id"):
            return Refusal(
                400,
                "agentloop sim is stateless: it cannot follow previous_response_id; send the "
                "whole conversation in 'input'",
                "unsupported_parameter",
            )
        if api == "responses":
            error = self._check_reasoning(body)
            if error is not None:
                status, message, why = error
                return Refusal(status, message, why or "")
        return body

    def _check_reasoning(self, body: dict[str, Any]) -> tuple[int, str, str | None] | None:
        """Count the reasoning items a Responses request passed back; the refusal, if any."""
        items = body.get("input")
        if not isinstance(items, list):
            return None
        try:
            priors = responses_priors(items)
        except (AttributeError, TypeError):
            return None  # _turn_for answers a malformed body
        check = _responses.check_reasoning(
            priors, body.get("store", True), self.plans, self.require_reasoning
        )
        self.reasoning_received += check.received
        if check.missing:
            self.reasoning_missing += 1
        return check.error

    def _turn_for(
        self, api: str, body: dict[str, Any], tokens: TokenCache
    ) -> tuple[TurnPlan, int, list[int]]:
        """The turn answering ``body``, the request's input tokens and each item's tokens."""
        if api == "chat":
            messages = body.get("messages") or []
            priors = chat_priors(messages)
            per_item = chat_item_tokens(messages, tokens.count)
        else:
            items = body.get("input") or []
            priors = responses_priors(items)
            per_item = responses_item_tokens(body.get("instructions"), items, tokens.count)
        total = sum(per_item)
        if self.plans is None:
            assert self.filler is not None
            return self.filler, total, per_item
        return pick_turn(self.plans, priors), total, per_item

    # ---- plan --------------------------------------------------------------------------------

    def _plan(
        self,
        t0: float,
        number: int,
        api: str,
        body: dict[str, Any],
        plan: TurnPlan,
        input_tokens: int,
        per_item: list[int],
    ) -> Planned:
        """The call ``body`` makes of ``plan`` and its deadlines from the arrival ``t0``."""
        limit = (
            body.get("max_output_tokens")
            if api == "responses"
            else body.get("max_completion_tokens") or body.get("max_tokens")
        )
        plan = truncate(plan, limit if isinstance(limit, int) else None)
        model = str(body.get("model") or DEFAULT_MODEL)
        profile = self.profiles.get(model, self.profile)
        tier = body.get("service_tier") or "default"
        cached = self.prefixes.lookup_and_store(model, request_items(api, body), per_item)
        call = Call(number, model, tier, plan, input_tokens, int(time.time()), cached)
        # THE speed model paces the stream: base + prefill (cached prefix at its own rate),
        # reasoning, then the visible tokens at the call's mean context-dependent interval
        parts = profile.parts(input_tokens, plan.turn.reasoning_tokens, plan.visible_tokens, cached)
        v = plan.visible_tokens
        inv = (
            parts.decode_s / (v - 1)
            if v > 1
            else profile.tpot_s(input_tokens + plan.turn.reasoning_tokens)
        )
        rng = random.Random(self.seed * 1_000_003 + number) if self.jitter > 0 else None
        sched = make_schedule(t0, parts.base_s, parts.reasoning_s, inv, v, self.jitter, rng)
        return Planned(call, parts, sched)

    def _stream_plan(self, api: str, body: dict[str, Any], planned: Planned) -> StreamPlan:
        """The events of a streamed answer, in the API (and, for Chat, the dialect) asked."""
        call, parts = planned.call, planned.parts
        if api != "chat":
            return _responses.stream_plan(call, body)
        timings = None
        if "timings" in self.dialect:
            timings = _chat.llama_timings(
                call.input_tokens,
                call.cached_tokens,
                parts.base_s,
                call.plan.turn.reasoning_tokens + call.plan.visible_tokens,
                parts.reasoning_s + parts.decode_s,
            )
        return _chat.stream_plan(call, body, self.dialect, timings)
