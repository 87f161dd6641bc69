"""The simulator's token counting, conversation reading, script matching and trace replay."""

from __future__ import annotations

import random

import pytest

from agentloop.model.tokens import (
    MESSAGE_OVERHEAD,
    TokenCache,
    chat_input_tokens,
    count_tokens,
    responses_input_tokens,
    split_tokens,
)
from agentloop.script import ScriptToolCall, ScriptTurn
from agentloop.sim import script_from_trace
from agentloop.sim.conversation import (
    ScriptMismatch,
    chat_priors,
    filler_turn,
    pick_turn,
    plan_turn,
    responses_priors,
)
from agentloop.trace.reader import load_trace
from agentloop.trace.tracer import Tracer
from agentloop.trace.writer import JsonlSink


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, world!", ["Hello", ",", " world", "!"]),
        ("a   b", ["a", "  ", " b"]),
        ('{"path": "a.py"}', ["{", '"', "path", '"', ":", ' "', "a", ".", "py", '"', "}"]),
        ("line one\n\tx_1 = 42\n", ["line", " one", "\n", "\t", "x_1", " =", " 42", "\n"]),
        ("", []),
    ],
)
def test_split_tokens_documented_examples(text, tokens):
    """Words keep one leading space; punctuation, newlines and stray whitespace are their own tokens."""
    assert split_tokens(text) == tokens
    assert count_tokens(text) == len(tokens)


def test_split_tokens_round_trips_any_text():
    """Tokens always concatenate back to the text, for arbitrary characters."""
    rng = random.Random(3)
    alphabet = "ab Z9_ \t\n\r,.{}\"'é中🙂\\-"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        assert "".join(split_tokens(text)) == text


def test_input_tokens_count_text_arguments_outputs_and_overhead():
    """Input tokens: every message's text, tool call names and arguments, tool outputs, plus overhead."""
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Fix it"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "ok done"},
    ]
    assert chat_input_tokens(chat) == 4 * MESSAGE_OVERHEAD + 3 + 2 + (1 + 7) + 2
    items = [
        {"role": "user", "content": "Fix it"},
        {"type": "reasoning", "id": "rs", "summary": []},
        {"type": "function_call", "call_id": "c", "name": "run", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c", "output": "ok done"},
    ]
    assert responses_input_tokens("Be brief.", items) == 4 * MESSAGE_OVERHEAD + 3 + 2 + (1 + 7) + 2
    assert responses_input_tokens(None, "Fix it") == MESSAGE_OVERHEAD + 2


def test_filler_turn_has_exactly_n_tokens():
    """Filler text of N tokens counts N with the simulator's tokenizer, deterministically per seed."""
    for n in (0, 1, 2, 17, 500):
        assert count_tokens(filler_turn(n).text) == n
    assert filler_turn(50, seed=1) == filler_turn(50, seed=1)
    assert filler_turn(50, seed=1) != filler_turn(50, seed=2)


def test_priors_chat_and_responses():
    """Chat counts assistant messages; Responses counts runs of consecutive model-output items."""
    chat = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": "x",
            "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "done"},
    ]
    assert [(p.text, p.calls) for p in chat_priors(chat)] == [("x", (("f", "{}"),)), ("done", ())]
    items = [
        {"role": "user", "content": "a"},
        {"type": "reasoning", "id": "r1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "function_call", "call_id": "1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "1", "output": "r"},
        {"type": "function_call_output", "call_id": "2", "output": "r"},
        {"type": "function_call", "call_id": "3", "name": "h", "arguments": "{}"},
    ]
    priors = responses_priors(items)
    assert [p.calls for p in priors] == [(("f", "{}"), ("g", "{}")), (("h", "{}"),)]
    assert priors[0].text == "x"
    assert responses_priors("just text") == []


def test_pick_turn_matches_and_rejects():
    """pick_turn answers with turn i after i matching turns and names the first difference."""
    script = [ScriptTurn(tool_calls=(ScriptToolCall("f", '{"a": 1}'),)), ScriptTurn(text="end")]
    plans = [plan_turn(i, t) for i, t in enumerate(script)]
    assert pick_turn(plans, []).index == 0
    assert (
        pick_turn(
            plans,
            chat_priors(
                [
                    {
                        "role": "assistant",
                        "tool_calls": [{"function": {"name": "f", "arguments": '{ "a" : 1 }'}}],
                    }
                ]
            ),
        ).turn.text
        == "end"
    )
    with pytest.raises(
        ScriptMismatch, match=r"calls tools \[\] , the script calls \['f'\]".replace(" ,", ",")
    ):
        pick_turn(plans, chat_priors([{"role": "assistant", "content": "hi"}]))
    with pytest.raises(ScriptMismatch, match="nothing scripted for turn 2"):
        pick_turn(
            plans,
            chat_priors(
                [
                    {
                        "role": "assistant",
                        "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}],
                    },
                    {"role": "assistant", "content": "end"},
                ]
            ),
        )


def test_turn_plan_tokens_and_call_ids():
    """A planned turn splits text and arguments into tokens and numbers its calls call_<turn>_<k>."""
    plan = plan_turn(
        3,
        ScriptTurn(
            text="Hi there.",
            tool_calls=(ScriptToolCall("a", "{}"), ScriptToolCall("b", '{"x": 2}')),
        ),
    )
    assert plan.text_tokens == ("Hi", " there", ".")
    assert plan.visible_tokens == 3 + 2 + 7
    assert [plan.call_id(k) for k in range(2)] == ["call_3_0", "call_3_1"]


async def test_script_from_trace_replays_model_outputs_in_step_order(tmp_path):
    """script_from_trace returns the recorded model outputs by step, skipping failed calls."""
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(path)
    tracer = Tracer(sink)
    tracer.header(run_id="r1", task={"name": "t"})
    outputs = [
        {
            "text": "Look.",
            "tool_calls": [{"id": "x", "name": "read_file", "arguments": '{"path": "a"}'}],
            "reasoning_tokens": 9,
        },
        {"text": "Fixed.", "tool_calls": [], "reasoning_tokens": 0},
    ]
    async with tracer.span("run", "invoke_agent t"):
        for step, out in enumerate(outputs, start=1):
            async with tracer.span("step", f"step {step}", step=step):
                if step == 2:
                    with pytest.raises(RuntimeError):
                        async with tracer.span("model", "chat sim"):
                            raise RuntimeError("429 forever")
                async with tracer.span("model", "chat sim") as span:
                    span.set(step=step, output=out)
    tracer.end("ok", steps=2)
    sink.close()
    turns = script_from_trace(load_trace(path))
    assert turns == [
        ScriptTurn(
            text="Look.",
            reasoning_tokens=9,
            tool_calls=(ScriptToolCall("read_file", '{"path": "a"}'),),
        ),
        ScriptTurn(text="Fixed."),
    ]


def test_token_cache_counts_like_the_tokenizer_and_stays_bounded():
    """The server's token cache gives the tokenizer's counts and never grows past its bound."""
    cache = TokenCache(max_entries=3, min_chars=4)
    texts = [f"message number {i}, with words" for i in range(10)] + ["ab", ""]
    for text in texts * 2:
        assert cache.count(text) == count_tokens(text)
    assert len(cache) <= 3
