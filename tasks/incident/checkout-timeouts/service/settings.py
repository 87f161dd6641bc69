"""Load and check checkout-api's config against measured upstream latency."""

import json
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADROOM = 1.3


def load_config(path: Path = HERE / "config.toml") -> dict:
    return tomllib.loads(path.read_text())


def load_latency(path: Path = HERE / "upstream_latency.json") -> dict:
    return json.loads(path.read_text())


def problems(config: dict, latency: dict) -> list[str]:
    """Every way the config breaks the runbook's rules, as readable sentences."""
    found = []
    budget = config["request_budget_ms"]
    for name in ("payment", "inventory"):
        upstream = config[name]
        need = latency[name]["p99"] * HEADROOM
        if upstream["timeout_ms"] < need:
            found.append(f"{name}: timeout_ms {upstream['timeout_ms']} is below p99 x "
                         f"{HEADROOM} = {need:.0f} ms")
        total = upstream["timeout_ms"] * (upstream["retries"] + 1)
        if total > budget:
            found.append(f"{name}: worst-case retry time {total} ms exceeds the request "
                         f"budget {budget} ms")
    return found
