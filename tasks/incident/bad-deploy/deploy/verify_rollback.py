"""Verify the rollback: the bad deploy is reverted in git, the tree is clean, and the running
service was started from the revert (its /health code_sha is HEAD)."""

import subprocess
import sys
from pathlib import Path

from deploy.smoke import get

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def problems() -> list[str]:
    found = []
    deploys = [line.split(" ", 1) for line in git("log", "--format=%H %s").splitlines()]
    bad = [sha for sha, subject in deploys if "(#812)" in subject
           and not subject.startswith("Revert")]
    if len(bad) != 1:
        return [f"expected one deploy #812 in the history, found {len(bad)}"]
    if f"This reverts commit {bad[0]}" not in git("log", "--format=%B"):
        found.append(f"deploy #812 ({bad[0][:7]}) is not reverted with git revert")
    if git("diff", f"{bad[0]}^", "HEAD", "--", "app/pricing.py"):
        found.append("app/pricing.py differs from the last good deploy")
    if "(#815)" not in git("log", "--format=%s"):
        found.append("the later deploy #815 is gone: revert only the bad deploy")
    if git("status", "--porcelain", "--untracked-files=no"):
        found.append("uncommitted changes in the work tree")
    try:
        status, body = get(int((ROOT / "run" / "app.port").read_text()), "/health")
        if status != 200 or body.get("code_sha") != git("rev-parse", "--short", "HEAD"):
            found.append(f"the running service is not on HEAD (health: {status} {body})")
    except (OSError, ValueError) as exc:
        found.append(f"orders-api is not reachable: {exc}")
    return found


def main() -> int:
    found = problems()
    if found:
        print("ROLLBACK INCOMPLETE: " + "; ".join(found))
        return 1
    print("ROLLBACK VERIFIED: #812 reverted, service restarted on HEAD "
          + git("rev-parse", "--short", "HEAD"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
