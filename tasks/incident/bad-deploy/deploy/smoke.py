"""Smoke test of the running orders-api: /health and every known order must answer 200."""

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def get(port: int, path: str) -> tuple[int, dict]:
    """Status and JSON body of one GET against the service."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def main() -> int:
    try:
        port = int((ROOT / "run" / "app.port").read_text())
    except (OSError, ValueError):
        print("SMOKE FAILED: orders-api is not running (no run/app.port)")
        return 1
    paths = ["/health"] + [f"/orders/{o['id']}" for o in
                           json.loads((ROOT / "app" / "orders.json").read_text())]
    failed = []
    for path in paths:
        try:
            status, body = get(port, path)
        except OSError as exc:
            status, body = 0, {"error": str(exc)}
        print(f"{status or 'ERR'} GET {path} {json.dumps(body)}")
        if status != 200:
            failed.append(f"{path} -> {status or 'connection refused'}")
    if failed:
        print(f"SMOKE FAILED: {len(failed)}/{len(paths)} requests failed: {', '.join(failed)}")
        return 1
    print(f"SMOKE OK: {len(paths)}/{len(paths)} requests answered 200")
    return 0


if __name__ == "__main__":
    sys.exit(main())
