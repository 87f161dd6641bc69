"""Live progress of a run in the terminal: a line per model call and tool, and the call in flight.

:class:`Progress` is an event sink (:mod:`agentloop.events`). While a model call streams, a TTY
shows one live status line (rich) with the call's elapsed time and tokens so far ("thinking"
while no visible token has come: hidden reasoning), replaced by the call's summary line when it
ends; while tools run, a live line names them with their elapsed time. On a TTY the lines are
coloured (ok green, FAILED red; none under ``NO_COLOR``, rich's rule). When stdout is not a TTY
(a pipe, a log file), a plain line is printed every :data:`PLAIN_EVERY_S` of a call instead, and
no colour. Every line printed goes through the trace redactor first, so a secret a tool printed
(or a model echoed) never reaches the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, TextIO

from agentloop.events import RunEvent
from agentloop.redact import Redactor, redactor

PLAIN_EVERY_S = 2.0  # without a TTY: one progress line per this much of a model call


def _who(data: Any) -> str:
    """A sub-run's lines start with its agent's name (the main agent's with nothing)."""
    agent = data.get("agent")
    return f"[{agent}] " if agent else ""


def model_line(data: Any) -> str:
    """The line for a finished model call (``model_end`` data)."""
    u = data["usage"]
    what = f"{len(data['tool_calls'])} tool call(s)" if data["tool_calls"] else "answer"
    tries = int(data["attempts"])
    retry = f", {tries - 1} retr{'y' if tries == 2 else 'ies'}" if tries > 1 else ""
    return (
        f"{_who(data)}step {data['step']:>2}  model {data['seconds']:7.2f} s  "
        f"{u.output_tokens:>5} tok ({u.reasoning_tokens} reasoning){retry}  -> {what}"
    )


def tool_line(data: Any) -> str:
    """The line for a finished tool call (``tool_end`` data): its first line of output."""
    mark = "ok" if data["ok"] else "FAILED"
    first = (str(data["output"]).strip().splitlines() or [""])[0][:70]
    name = f"{_who(data)}{data['name']}"
    return f"          {name:<21} {data['seconds']:7.3f} s  {mark}  {first}"


def live_line(data: Any) -> str:
    """The status of a model call in flight (``model_progress`` data)."""
    tokens = int(data["output_tokens"])
    doing = f"{tokens} tok so far" if tokens else "thinking (no visible token yet)"
    return f"{_who(data)}step {data['step']:>2}  model {data['elapsed_s']:7.2f} s  {doing} ..."


def tools_line(running: Iterable[tuple[str, float]], now: float) -> str:
    """The status of the tools in flight: ``running`` holds (name, monotonic start) pairs."""
    names = ", ".join(f"{n} {now - t0:.1f} s" for n, t0 in running)
    return f"          running {names} ..."


# styles of the words a finished line is read by (on a TTY with colour)
STYLES = {"  ok  ": "green", "  FAILED  ": "bold red"}


class _ToolsStatus:
    """The live line of the tools in flight, its elapsed times read each time rich draws it."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __rich__(self) -> Any:
        from rich.text import Text

        # a copy in one C call: the event thread may add a tool while rich's thread draws
        line = tools_line(tuple(self.progress.running.values()), time.monotonic())
        return Text(self.progress.redact.text(line), style="yellow")


class Progress:
    """Prints a run as it goes; ``live`` (default: ``out`` is a TTY) animates the call in flight."""

    def __init__(
        self,
        out: TextIO,
        quiet: bool = False,
        live: bool | None = None,
        redact: Redactor | None = None,
    ) -> None:
        self.out, self.quiet = out, quiet
        self.redact = redact or redactor()
        self.live = out.isatty() if live is None else live
        self._status: Any = None  # rich.live.Live while a call is in flight on a TTY
        self._console: Any = None
        self._next_plain = PLAIN_EVERY_S
        self.running: dict[str, tuple[str, float]] = {}  # tools in flight: span id -> name, start

    def __call__(self, event: RunEvent) -> None:
        if self.quiet:
            return
        try:
            self._show(event)
        except BrokenPipeError:  # the reader went away (`| head`): the run goes on, unshown
            self.quiet = True

    def _show(self, event: RunEvent) -> None:
        kind, data = event.kind, event.data
        if kind == "model_start":
            self._next_plain = PLAIN_EVERY_S
        elif kind == "model_progress":
            self._progress(data)
        elif kind == "model_end":
            self.line(model_line(data))
        elif kind == "tool_start":
            self.running[str(event.span_id)] = (str(data["name"]), time.monotonic())
            self._show_tools()
        elif kind == "tool_end":
            self.running.pop(str(event.span_id), None)
            self.line(tool_line(data))
            self._show_tools()
        elif kind == "run_end":
            self._stop()

    def _progress(self, data: Any) -> None:
        text = self.redact.text(live_line(data))
        if not self.live:
            if data["elapsed_s"] >= self._next_plain:
                self._next_plain += PLAIN_EVERY_S
                print(text, file=self.out, flush=True)
            return
        from rich.text import Text

        if self._status is None:
            from rich.live import Live

            # refreshed by our own events (every 0.25 s), not by rich's refresh thread
            self._status = Live(console=self.console(), auto_refresh=False, transient=True)
            self._status.start()
        self._status.update(Text(text, style="dim"), refresh=True)

    def _show_tools(self) -> None:
        """On a TTY, the live line of the tools still running (none: no line)."""
        if not self.live or not self.running or self._status is not None:
            return
        from rich.live import Live

        # no event comes while a tool runs, so rich's refresh thread redraws the elapsed times
        # (4 a second); it is stopped before any line is printed
        self._status = Live(
            _ToolsStatus(self), console=self.console(), refresh_per_second=4, transient=True
        )
        self._status.start()

    def console(self) -> Any:
        """The rich console of a TTY's live lines and colours (``NO_COLOR``: no colour)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.out, highlight=False, force_terminal=True)
        return self._console

    def close(self) -> None:
        """End the live line, if one is shown (before a last line of the command's own)."""
        self._stop()

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def line(self, text: str) -> None:
        """Print one finished line (redacted), replacing the live status if one is shown."""
        self._stop()
        text = self.redact.text(text)
        if not self.live:
            print(text, file=self.out, flush=True)
            return
        from rich.text import Text

        shown = Text(text)
        for word, style in STYLES.items():
            shown.highlight_words([word], style)
        self.console().print(shown, soft_wrap=True)
        self.out.flush()
