"""The five test charges through the gateway's settings: SMOKE OK, or which were declined.

The acquirer's answer time for each test card is fixed (its sandbox answers in these times), so
a charge is declined when the gateway gives up before the acquirer answers, on every try.
"""

import sys

from gateway import settings

# (card, currency, the acquirer sandbox's answer time in ms)
TEST_CHARGES = [
    ("4242", "EUR", 410),
    ("4000", "USD", 520),
    ("5555", "GBP", 640),
    ("3782", "EUR", 780),
    ("6011", "SEK", 450),
]


def charge(conf: dict, currency: str, answer_ms: int) -> str | None:
    """None: approved; else why the gateway declined it."""
    if currency not in conf["currencies"]:
        return f"currency {currency} not enabled"
    timeout = conf["acquirer_timeout_ms"]
    if answer_ms > timeout:
        tries = 1 + conf["retries"]
        return f"acquirer timeout after {timeout} ms x{tries} (it answers in {answer_ms} ms)"
    return None


def main() -> int:
    conf = settings.gateway()
    declined = []
    for card, currency, answer_ms in TEST_CHARGES:
        why = charge(conf, currency, answer_ms)
        print(f"charge card ...{card} {currency}: " + ("DECLINED: " + why if why else "approved"))
        if why:
            declined.append(card)
    if declined:
        print(f"SMOKE FAILED: {len(declined)} of {len(TEST_CHARGES)} charges declined")
        return 1
    print(f"SMOKE OK: {len(TEST_CHARGES)} of {len(TEST_CHARGES)} charges approved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
