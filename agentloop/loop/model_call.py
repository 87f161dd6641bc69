"""One model call's work inside its open span: the context fit recorded, the answer or failure set.

What :meth:`agentloop.loop.runner.Runner._model_call` does inside the ``model`` span it opens:
the context window's trims as ``context.trim`` events (:func:`record_fit`), then the client's
answer, or its final failure, as the span's attributes (:func:`complete`), with live token
progress as ``model_progress`` events for a sink that wants them.
"""

from __future__ import annotations

from agentloop.config.tiers import Tier
from agentloop.errors import ModelError
from agentloop.events import call_progress
from agentloop.loop.context_window import Fit
from agentloop.loop.model_span import failed_model_attrs, model_attrs
from agentloop.loop.run_events import RunEvents
from agentloop.protocols import ModelClient
from agentloop.trace import attrs as A
from agentloop.trace.tracer import Span, Tracer
from agentloop.types import ModelRequest, ModelResponse


async def complete(
    request: ModelRequest,
    span: Span,
    client: ModelClient,
    tier: Tier,
    tracer: Tracer,
    emit: RunEvents,
) -> ModelResponse | ModelError:
    """The client's answer (or its final failure), set on the open model span; live token
    progress as ``model_progress`` events for a sink that wants them."""
    step = request.step

    def progress(tokens: int, elapsed_s: float) -> None:
        emit.model_progress(span, step, tokens, elapsed_s)

    try:
        async with call_progress(progress if emit.wants("model_progress") else None):
            resp = await client.complete(request)
    except ModelError as exc:
        span.set(**failed_model_attrs(exc, tracer, tier, step))
        span.status = "error"
        return exc
    span.set(**model_attrs(resp, tracer, tier, step))
    return resp


def record_fit(tracer: Tracer, span: Span, fit: Fit) -> None:
    """Each trim as a ``context.trim`` event of the model span, and the fit in its attrs."""
    trims = [t.as_dict() for t in fit.trims]
    for trim in trims:
        tracer.event(span, A.EVENT_CONTEXT_TRIM, **trim)
    span.set(**{A.CONTEXT_ESTIMATED_TOKENS: fit.estimated, A.CONTEXT_TRIMMED: trims})
