"""The gateway's settings are sane against what the acquirer is measured to do."""

from gateway import settings


def test_timeout_covers_the_acquirers_p99_twice():
    assert settings.gateway()["acquirer_timeout_ms"] >= 2 * settings.acquirer()["p99_ms"]


def test_retries_are_bounded():
    assert 0 <= settings.gateway()["retries"] <= 3


def test_currencies_are_iso_codes():
    assert all(len(c) == 3 and c.isupper() for c in settings.gateway()["currencies"])
