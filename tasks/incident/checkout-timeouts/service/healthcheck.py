"""Print the config verdict for the incident channel; exit 1 when the config is unsafe."""

import sys

from service.settings import load_config, load_latency, problems


def main() -> int:
    found = problems(load_config(), load_latency())
    if found:
        print("UNSAFE: " + "; ".join(found))
        return 1
    print("SAFE: checkout-api timeouts cover upstream p99 with headroom and fit the budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
