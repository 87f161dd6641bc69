"""``agentloop tasks``: list the task files shipped with agentloop (runnable by name)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from agentloop.config.shipped import shipped_tasks


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tasks",
        help="list the shipped tasks (run one by name)",
        description=(
            "List the task files installed with agentloop. Run one by name from any folder: "
            "`agentloop run checkout-timeouts`; a path to a task file works too."
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=main)


async def main(args: argparse.Namespace) -> int:
    tasks = shipped_tasks()
    if args.json:
        sys.stdout.write(
            orjson.dumps(
                [
                    {
                        "name": t.name,
                        "group": t.group,
                        "path": str(t.path),
                        "description": t.description,
                    }
                    for t in tasks
                ],
                option=orjson.OPT_INDENT_2,
            ).decode()
            + "\n"
        )
        return 0
    if not tasks:
        print("no shipped tasks installed (the agentloop_tasks package is missing)")
        return 0
    width = max(len(t.name) for t in tasks)
    for t in tasks:
        desc = t.description if len(t.description) <= 90 else t.description[:87] + "..."
        print(f"{t.name:<{width}}  {t.group:<9}  {desc}")
    print(f"\nrun one: agentloop run {tasks[0].name}   (files under {tasks[0].path.parent.parent})")
    return 0
