"""The gateway's settings (config/gateway.toml) and the acquirer's latency (config/acquirer.toml)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(name: str) -> dict:
    return tomllib.loads((ROOT / "config" / name).read_text())


def gateway() -> dict:
    return load("gateway.toml")


def acquirer() -> dict:
    return load("acquirer.toml")
