"""``agentloop report TRACE --transcript``: the run's conversation on a terminal (rich).

Draws :mod:`agentloop.export.transcript` (the model the HTML pages draw too): the prompts, each
step's model text and reasoning summary (or its hidden reasoning tokens), each tool call with its
arguments and output folded past :data:`FOLD_LINES` lines, the answer and the success check.
Colours on a terminal, none when piped or under ``NO_COLOR`` (rich's own rule).
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from agentloop.export.transcript import ModelTurn, ToolEntry, Transcript

FOLD_LINES = 12  # of a tool output, shown before "... N more lines"


def _fold(text: str, lines: int = FOLD_LINES) -> Text:
    rows = text.splitlines()
    if len(rows) <= lines:
        return Text(text)
    out = Text("\n".join(rows[: lines - 2]))  # the head, then the last two lines
    out.append(f"\n... {len(rows) - lines} more lines ...\n", style="dim italic")
    out.append("\n".join(rows[-2:]))
    return out


def _secs(ns: int | None) -> str:
    return "running" if ns is None else f"{ns / 1e9:.2f} s"


def _model(m: ModelTurn, step: int | None) -> Panel:
    parts: list[Text] = []
    for r in m.reasoning:
        parts.append(Text(r, style="italic dim"))
    if not m.reasoning and m.reasoning_tokens:
        parts.append(Text(f"({m.reasoning_tokens:,} hidden reasoning tokens)", style="dim"))
    if m.text.strip():
        parts.append(Text(m.text))
    if m.status != "ok":
        parts.append(Text("still answering" if m.status == "in_flight" else m.status, "red"))
    title = f"step {step} · model" if step is not None else "model"
    return Panel(
        Group(*parts) if parts else Text("(tool calls only)", style="dim"),
        title=f"[bold green]{title}[/]",
        subtitle=f"{m.output_tokens:,} tok · {_secs(m.duration_ns)}",
        title_align="left",
        subtitle_align="right",
        border_style="green",
    )


def _tool(t: ToolEntry) -> Panel:
    if t.output is None:
        verdict, style = "running", "yellow"
    else:
        verdict, style = ("ok", "cyan") if t.ok else ("FAILED", "bold red")
    parts: list[Text] = []
    if t.arguments not in ("", "{}"):
        parts.append(Text(t.arguments, style="magenta"))
    if t.output is not None:
        parts.append(_fold(t.output))
    return Panel(
        Group(*parts) if parts else Text(""),
        title=f"[bold]{escape(t.name)}[/] [{style}]{verdict}[/]",
        subtitle=_secs(t.duration_ns),
        title_align="left",
        subtitle_align="right",
        border_style=style,
    )


def print_transcript(t: Transcript, console: Console | None = None) -> None:
    """Print ``t`` to ``console`` (default: stdout)."""
    c = console or Console(highlight=False)
    c.rule(f"[bold]{escape(t.task)}[/] on {escape(t.tier)}")
    if t.system.strip():
        c.print(Panel(Text(t.system), title="system", title_align="left", border_style="dim"))
    c.print(
        Panel(Text(t.prompt), title="[bold blue]user[/]", title_align="left", border_style="blue")
    )
    for s in t.steps:
        if s.model is not None:
            c.print(_model(s.model, s.number))
        for x in s.tools:
            c.print(_tool(x))
    c.print(
        Panel(
            Text(t.answer or "(no answer)"),
            title=f"[bold yellow]final answer[/] · {escape(t.status)}: {escape(t.reason)}",
            title_align="left",
            border_style="yellow",
        )
    )
    if t.check is not None:
        verdict = "[bold green]passed[/]" if t.check.passed else "[bold red]failed[/]"
        body = [Text(t.check.detail)]
        if t.check.output:
            body.append(_fold(t.check.output))
        c.print(
            Panel(
                Group(*body),
                title=f"success check {verdict}",
                title_align="left",
                border_style="dim",
            )
        )
