"""Live progress of a run in the terminal: a line per model call and tool, and the call in flight.

:class:`Progress` is an event sink (:mod:`agentloop.events`). While a model call streams, a TTY
shows one live status line (rich) with the call's elapsed time and tokens so far, replaced by the
call's summary line when it ends; when stdout is not a TTY (a pipe, a log file), a plain line is
printed every :data:`PLAIN_EVERY_S` of a call instead. Every line printed goes through the trace
redactor first, so a secret a tool printed (or a model echoed) never reaches the terminal.
"""

from __future__ import annotations

from typing import Any, TextIO

from agentloop.events import RunEvent
from agentloop.redact import Redactor, redactor

PLAIN_EVERY_S = 2.0  # without a TTY: one progress line per this much of a model call


def model_line(data: Any) -> str:
    """The line for a finished model call (``model_end`` data)."""
    u = data["usage"]
    what = f"{len(data['tool_calls'])} tool call(s)" if data["tool_calls"] else "answer"
    tries = int(data["attempts"])
    retry = f", {tries - 1} retr{'y' if tries == 2 else 'ies'}" if tries > 1 else ""
    return (
        f"step {data['step']:>2}  model {data['seconds']:7.2f} s  "
        f"{u.output_tokens:>5} tok ({u.reasoning_tokens} reasoning){retry}  -> {what}"
    )


def tool_line(data: Any) -> str:
    """The line for a finished tool call (``tool_end`` data): its first line of output."""
    mark = "ok" if data["ok"] else "FAILED"
    first = (str(data["output"]).strip().splitlines() or [""])[0][:70]
    return f"          {data['name']:<21} {data['seconds']:7.3f} s  {mark}  {first}"


def live_line(data: Any) -> str:
    """The status of a model call in flight (``model_progress`` data)."""
    tokens = int(data["output_tokens"])
    doing = f"{tokens} tok so far" if tokens else "waiting for the first token"
    return f"step {data['step']:>2}  model {data['elapsed_s']:7.2f} s  {doing} ..."


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
        elif kind == "tool_end":
            self.line(tool_line(data))
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
            from rich.console import Console
            from rich.live import Live

            self._console = self._console or Console(
                file=self.out, highlight=False, force_terminal=True
            )
            # refreshed by our own events (every 0.25 s), not by rich's refresh thread
            self._status = Live(console=self._console, auto_refresh=False, transient=True)
            self._status.start()
        self._status.update(Text(text, style="dim"), refresh=True)

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def line(self, text: str) -> None:
        """Print one finished line (redacted), replacing the live status if one is shown."""
        self._stop()
        print(self.redact.text(text), file=self.out, flush=True)
