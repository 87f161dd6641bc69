"""Collect the probes' results into the data file the status page renders (site/data/status.js).

Probe v2 reports one of: operational, degraded, partial_outage, major_outage, down.
`--print` also lists each component's status as the probes see it.
"""

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATUSES = ("operational", "degraded", "partial_outage", "major_outage", "down")


def results() -> list[dict]:
    """Every component's latest probe result, by component name."""
    found = [json.loads(p.read_text()) for p in sorted((ROOT / "probes" / "results").glob("*.json"))]
    for r in found:
        if r["status"] not in STATUSES:
            raise SystemExit(f"probes/results/{r['component']}.json: unknown status {r['status']!r}")
    return found


def main() -> int:
    found = results()
    data = {"generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "components": [{"name": r["component"], "status": r["status"]} for r in found]}
    out = ROOT / "site" / "data" / "status.js"
    out.parent.mkdir(parents=True, exist_ok=True)  # git keeps no empty folder: made here
    out.write_text("window.STATUS = " + json.dumps(data, indent=2) + ";\n")
    if "--print" in sys.argv:
        for r in found:
            print(f"{r['component']:<10} {r['status']:<15} {r['detail']}")
    print(f"wrote {out.relative_to(ROOT)}: {len(found)} components")
    return 0


if __name__ == "__main__":
    sys.exit(main())
