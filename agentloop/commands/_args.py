"""Argument types shared by the subcommands: numbers that must be positive say so (exit 2)."""

from __future__ import annotations

import argparse

from agentloop.config.routing import Routing, load_plan, parse_routes
from agentloop.errors import ConfigError


def positive_int(text: str) -> int:
    """An integer of at least 1 (``--max-steps 0`` is refused, not ignored)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def positive_float(text: str) -> float:
    """A number of seconds (or a factor) above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (got {text})")
    return value


def add_routing(p: argparse.ArgumentParser) -> None:
    """``--route AGENT=TIER`` (repeatable) and ``--routing PLAN.json``: which tier each agent's
    (or each single call's) model calls use, over the task's ``routing:`` and ``--tier``."""
    p.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="AGENT=TIER",
        help="run AGENT's model calls ('main': the top agent) on TIER; repeatable",
    )
    p.add_argument(
        "--routing",
        metavar="PLAN.json",
        help="a routing plan (from `agentloop route -o`): a tier per agent or per call",
    )


def routing_from(args: argparse.Namespace, task_name: str | None = None) -> Routing | None:
    """The routing the flags give (``--route`` over the plan), or None; a plan for another
    task than ``task_name`` is refused naming the file."""
    routing = load_plan(args.routing) if args.routing else None
    if routing is not None and task_name is not None and routing.task not in (None, task_name):
        raise ConfigError(
            f"{args.routing}: field 'task': the plan is for task '{routing.task}', not "
            f"'{task_name}' (compute one from a trace of '{task_name}' with agentloop route)"
        )
    if args.route:
        routing = (routing or Routing()).over(parse_routes(args.route))
    return routing
