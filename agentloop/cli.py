"""The ``agentloop`` command line: parses arguments, runs one subcommand, maps errors to exits."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import os
import sys
from collections.abc import Sequence

from agentloop._version import __version__
from agentloop.errors import AgentloopError

# one module per subcommand under agentloop/commands/, each exposing register(subparsers)
COMMANDS: tuple[str, ...] = (
    "run",
    "replay",
    "sim",
    "report",
    "whatif",
    "route",
    "compare",
    "tiers",
    "probe",
    "tasks",
    "suite",
    "serve",
    "export",
    "importer",
    "mcpserve",
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the arguments, only the command they name is imported (a warm
    ``whatif`` of a big trace answers in a few seconds, and importing all fifteen commands costs
    one or two of them), else every command (``agentloop --help`` lists them all)."""
    parser = argparse.ArgumentParser(
        prog="agentloop",
        description="Run agent tasks, trace where their time goes, predict faster tiers.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"agentloop {__version__}",
        help="print agentloop's version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    words = [a for a in argv or () if not a.startswith("-")]
    named = words[0] if words and words[0] in COMMANDS else None
    for name in COMMANDS if named is None else (named,):
        importlib.import_module(f"agentloop.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the one ``asyncio.run`` of agentloop."""
    frozen = gc.get_freeze_count()
    try:
        # inside: a Ctrl-C while importing is one line too
        args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
        return int(asyncio.run(args.func(args)) or 0)
    except AgentloopError as exc:
        print(f"agentloop: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("agentloop: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`agentloop report ... | head`): stop quietly, as a SIGPIPE'd
        # program would; stdout goes to /dev/null so the interpreter's last flush cannot fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        # an analysis command froze what it loaded out of the collector's sight (the CLI's
        # decision: commands.report.load_for_analysis); a caller that runs the CLI in its own
        # process (a test, an embedding) gets its collector back as it was
        if frozen == 0 and gc.get_freeze_count():
            gc.unfreeze()


if __name__ == "__main__":
    sys.exit(main())
