"""Check logrotate retention against the log volume's budget; exit 1 when it does not fit."""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_conf(text: str) -> dict:
    """The settings of a logrotate stanza that matter for disk use."""
    rotate = re.search(r"^\s*rotate\s+(\d+)", text, re.M)
    compress = re.search(r"^\s*compress\s*$", text, re.M) is not None
    return {"rotate": int(rotate.group(1)) if rotate else 0, "compress": compress}


def daily_mb(logs: Path) -> float:
    """Average size of one rotated day of logs, in MB."""
    days = sorted(logs.glob("access.log.*"))
    if not days:
        return 0.0
    return sum(p.stat().st_size for p in days) / len(days) / 1e6


def problems(conf: dict, budget: dict, day_mb: float) -> list[str]:
    found = []
    ratio = budget["compression_ratio"] if conf["compress"] else 1.0
    need = day_mb * conf["rotate"] * ratio
    allowed = budget["volume_mb"] * (1 - budget["keep_free"])
    if need > allowed:
        found.append(f"retention needs {need:.0f} MB, the budget allows {allowed:.0f} MB")
    if conf["rotate"] < budget["min_retention_days"]:
        found.append(f"rotate {conf['rotate']} is below the {budget['min_retention_days']}-day "
                     f"compliance minimum")
    return found


def main() -> int:
    conf = parse_conf((ROOT / "logrotate" / "gateway.conf").read_text())
    budget = tomllib.loads((ROOT / "ops" / "budget.toml").read_text())
    found = problems(conf, budget, daily_mb(ROOT / "logs"))
    if found:
        print("OVER BUDGET: " + "; ".join(found))
        return 1
    print("WITHIN BUDGET: gateway log retention fits /var/log with 25% free")
    return 0


if __name__ == "__main__":
    sys.exit(main())
