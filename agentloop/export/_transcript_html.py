"""The transcript (:mod:`agentloop.export.transcript`) as HTML: no script, ``<details>`` to fold.

Each message has the id ``{prefix}{span id}``, the anchor a waterfall bar links to; CSS
``:target`` marks the one arrived at, and each message links back to its waterfall.
"""

from __future__ import annotations

from html import escape

from agentloop.export.transcript import ModelTurn, ToolEntry, Transcript

SHOWN_CHARS = 1_500  # of a long output, shown before "show all"
KEPT_CHARS = 40_000  # the most of one output a page holds (the rest said, not shown)

CSS = """
.transcript{max-width:1100px} .msg{border-left:4px solid #ccd;padding:4px 10px;margin:8px 0;
content-visibility:auto;contain-intrinsic-size:auto 120px;
background:#fafbfd} .msg:target{border-color:#c0392b;background:#fff6e6;outline:1px solid #e8b}
.msg h3{font-size:13px;margin:0 0 4px;color:#334} .msg .back{float:right;font-size:11px}
.role-system{border-color:#999} .role-user{border-color:#3b5ba5} .role-model{border-color:#2ca02c}
.role-tool{border-color:#8c6d31} .role-tool.failed{border-color:#c0392b}
.role-answer{border-color:#ff7f0e;background:#fffaf0} .role-check{border-color:#777}
.msg pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font:12px/1.4 ui-monospace,
monospace;background:#fff;border:1px solid #eee;padding:6px;max-height:none}
.reasoning{color:#555;font-style:italic} .hidden{color:#777}
.bad{color:#c0392b;font-weight:600} .good{color:#2a7d2a;font-weight:600}
details>summary{cursor:pointer}
"""


def _s(ns: int | None) -> str:
    return "running" if ns is None else f"{ns / 1e9:.3f} s"


def _pre(text: str, cls: str = "") -> str:
    """``text`` in a ``<pre>``; past :data:`SHOWN_CHARS` the rest folded under "show all"."""
    c = f' class="{cls}"' if cls else ""
    if len(text) <= SHOWN_CHARS:
        return f"<pre{c}>{escape(text)}</pre>"
    kept = text[:KEPT_CHARS]
    cut = len(text) - len(kept)
    more = f"\n[... {cut:,} more chars not kept in this page ...]" if cut else ""
    return (
        f"<pre{c}>{escape(text[:SHOWN_CHARS])}</pre><details><summary>show all "
        f"{len(text):,} chars</summary><pre{c}>{escape(kept[SHOWN_CHARS:])}{more}</pre></details>"
    )


def _msg(anchor: str, role: str, title: str, body: str, back: str, extra: str = "") -> str:
    ident = f' id="{escape(anchor)}"' if anchor else ""
    link = f'<a class="back" href="#{escape(back)}">waterfall</a>' if back else ""
    return f'<div class="msg role-{role}{extra}"{ident}>{link}<h3>{title}</h3>{body}</div>'


def _model(m: ModelTurn, step: str, prefix: str, back: str) -> str:
    parts = []
    if m.reasoning:
        parts.append(
            '<details open class="reasoning"><summary>reasoning summary</summary>'
            + "".join(_pre(r, "reasoning") for r in m.reasoning)
            + "</details>"
        )
    elif m.reasoning_tokens:
        parts.append(f'<p class="hidden">{m.reasoning_tokens:,} hidden reasoning tokens</p>')
    if m.text.strip():
        parts.append(_pre(m.text))
    if m.status == "in_flight":
        parts.append('<p class="bad">still answering when the trace ends</p>')
    elif m.status != "ok":
        parts.append(f'<p class="bad">model call {escape(m.status)}</p>')
    title = f"{step}model &middot; {m.output_tokens:,} tokens &middot; {_s(m.duration_ns)}"
    return _msg(prefix + m.span_id, "model", title, "".join(parts), back)


def _tool(t: ToolEntry, prefix: str, back: str) -> str:
    verdict = (
        "running" if t.output is None else ("ok" if t.ok else '<span class="bad">FAILED</span>')
    )
    out = "" if t.output is None else _pre(t.output)
    args = t.arguments if t.arguments not in ("", "{}") else ""
    body = (
        f"<details{' open' if len(t.output or '') <= SHOWN_CHARS else ''}><summary>arguments and "
        f"output</summary>{_pre(args) if args else ''}{out}</details>"
    )
    title = f"tool <b>{escape(t.name)}</b> &middot; {verdict} &middot; {_s(t.duration_ns)}"
    failed = " failed" if t.output is not None and not t.ok else ""
    return _msg(prefix + t.span_id, "tool", title, body, back, failed)


def transcript_html(t: Transcript, *, prefix: str = "", back: str = "waterfall") -> str:
    """The transcript section: ids ``{prefix}{span id}``, links back to ``#{back}``."""
    out = [f'<div class="transcript" id="{escape(prefix)}transcript">']
    if t.system.strip():
        out.append(_msg("", "system", "system prompt", _pre(t.system), back))
    out.append(_msg("", "user", "user prompt", _pre(t.prompt), back))
    for s in t.steps:
        step = f"step {s.number} &middot; " if s.number is not None else ""
        if s.model is not None:
            out.append(_model(s.model, step, prefix, back))
        out.extend(_tool(x, prefix, back) for x in s.tools)
    out.append(
        _msg(
            f"{prefix}answer",
            "answer",
            f"final answer &middot; {escape(t.status)}: {escape(t.reason)}",
            _pre(t.answer) if t.answer else '<p class="hidden">no answer</p>',
            back,
        )
    )
    if t.check is not None:
        verdict = (
            '<span class="good">passed</span>'
            if t.check.passed
            else '<span class="bad">failed</span>'
        )
        out.append(
            _msg(
                f"{prefix}check",
                "check",
                f"success check &middot; {verdict}",
                f"<p>{escape(t.check.detail)}</p>"
                + (_pre("$ " + t.check.command) if t.check.command else "")
                + (_pre(t.check.output) if t.check.output else ""),
                back,
            )
        )
    out.append("</div>")
    return "".join(out)
