from service.settings import load_config, load_latency, problems


def test_deployed_config_follows_the_runbook():
    assert problems(load_config(), load_latency()) == []


def test_rules_catch_a_short_timeout():
    config = {"request_budget_ms": 4000,
              "payment": {"timeout_ms": 100, "retries": 0},
              "inventory": {"timeout_ms": 400, "retries": 0}}
    latency = {"payment": {"p99": 870}, "inventory": {"p99": 210}}
    assert problems(config, latency) == ["payment: timeout_ms 100 is below p99 x 1.3 = 1131 ms"]


def test_rules_catch_a_retry_storm():
    config = {"request_budget_ms": 4000,
              "payment": {"timeout_ms": 1200, "retries": 3},
              "inventory": {"timeout_ms": 400, "retries": 0}}
    latency = {"payment": {"p99": 870}, "inventory": {"p99": 210}}
    assert problems(config, latency) == [
        "payment: worst-case retry time 4800 ms exceeds the request budget 4000 ms"]
