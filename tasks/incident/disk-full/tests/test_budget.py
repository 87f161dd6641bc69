import tomllib

from ops.disk_budget import ROOT, daily_mb, parse_conf, problems


def budget():
    return tomllib.loads((ROOT / "ops" / "budget.toml").read_text())


def test_deployed_retention_fits_the_volume():
    conf = parse_conf((ROOT / "logrotate" / "gateway.conf").read_text())
    assert problems(conf, budget(), daily_mb(ROOT / "logs")) == []


def test_compression_is_counted():
    conf = {"rotate": 100, "compress": True}
    assert problems(conf, budget(), 1.0) == []
    conf["compress"] = False
    assert problems(conf, budget(), 1.0) == [
        "retention needs 100 MB, the budget allows 15 MB"]


def test_compliance_minimum():
    assert problems({"rotate": 7, "compress": True}, budget(), 10) == [
        "rotate 7 is below the 14-day compliance minimum"]
