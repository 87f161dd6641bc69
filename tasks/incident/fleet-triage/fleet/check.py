"""Fleet health check: can db-proxy's pool serve every service's peak connections?

python -m fleet.check prints FLEET OK (exit 0) or FLEET DEGRADED with the shortfall (exit 1).
"""

import sys
import tomllib
from pathlib import Path

HEADROOM = 1.25  # the capacity plan keeps a quarter spare


def main() -> int:
    proxy = tomllib.loads(Path("config/db-proxy.toml").read_text())["pool"]
    peak = tomllib.loads(Path("config/services.toml").read_text())["peak_connections"]
    need = sum(peak.values())
    have = int(proxy["max_connections"])
    starved = sorted(name for name, n in peak.items() if n > 0 and have < need)
    if have >= need * HEADROOM:
        print(f"FLEET OK: db-proxy pool {have} >= peak demand {need} x {HEADROOM} headroom")
        return 0
    print(
        f"FLEET DEGRADED: db-proxy pool {have} < peak demand {need} x {HEADROOM}; "
        f"starved: {', '.join(starved) or 'none'}"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
