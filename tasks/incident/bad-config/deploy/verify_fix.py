"""Verify the fix: a new commit of config/gateway.toml alone on top of the pushes (none
rewritten), the timeout restored, the rest of push #655 (SEK) kept, the work tree clean."""

import subprocess
import sys
from pathlib import Path

from gateway import settings

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def problems() -> list[str]:
    found = []
    subjects = git("log", "--format=%s").splitlines()
    for ticket in ("(#640)", "(#655)", "(#658)"):
        if sum(ticket in s for s in subjects[1:]) != 1:
            found.append(f"the push {ticket} is not in the history once (history rewritten?)")
    if "(#658)" not in subjects[1]:
        found.append("the fix is not one new commit on top of the last push (#658)")
    if "#655" not in subjects[0]:
        found.append(f"the fix commit's subject does not name #655: {subjects[0]!r}")
    changed = git("show", "--format=", "--name-only", "HEAD").splitlines()
    if changed != ["config/gateway.toml"]:
        found.append(f"the fix commit changes {changed}, not config/gateway.toml alone")
    conf = settings.gateway()
    if "SEK" not in conf["currencies"]:
        found.append("SEK is gone: keep the rest of push #655")
    if conf["acquirer_timeout_ms"] != 3000:
        found.append(f"acquirer_timeout_ms is {conf['acquirer_timeout_ms']}, not the 3000 of before")
    if git("status", "--porcelain", "--untracked-files=no"):
        found.append("uncommitted changes in the work tree")
    return found


def main() -> int:
    found = problems()
    if found:
        print("FIX INCOMPLETE: " + "; ".join(found))
        return 1
    print("FIX VERIFIED: " + git("log", "-1", "--format=%h %s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
