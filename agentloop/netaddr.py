"""Which hosts are this machine's loopback: one rule for the browser's network limit and `serve`."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost`` (and ``*.localhost``) or a loopback IP, brackets and a trailing dot allowed."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
