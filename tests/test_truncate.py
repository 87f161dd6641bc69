"""One truncator: trace strings and tool output are cut the same way, within their cap."""

from __future__ import annotations

from agentloop_tools._sandbox import cap_text

from agentloop.redact import clip, truncator


def test_a_long_trace_string_keeps_head_and_tail_within_the_cap() -> None:
    """A trace string over the cap is cut to at most the cap, head and tail kept, the cut said."""
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = truncator(2_000)({"attrs": {"output": text, "short": "ok"}, "n": 3})
    cut = out["attrs"]["output"]
    assert (True, True, True, "ok", 3) == (
        len(cut) <= 2_000,
        cut.startswith("HEAD") and cut.endswith("TAIL"),
        "chars cut from the middle of a string (10,008 chars in all)" in cut,
        out["attrs"]["short"],
        out["n"],
    )


def test_tool_output_is_cut_by_the_same_truncator() -> None:
    """The tools' cap is the trace's truncator, with the tools' wording of the cap."""
    text = "a" * 5_000
    assert clip(text, 1_000) == cap_text(text, 1_000)
    assert "output capped at 1,000 chars" in cap_text(text, 1_000)
    assert text == cap_text(text, 5_000)
