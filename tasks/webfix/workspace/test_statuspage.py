from statuspage import headline, overall, render


def test_all_ok_is_operational():
    assert overall({"api": "ok", "database": "ok"}) == "operational"


def test_one_down_is_degraded():
    assert overall({"api": "ok", "cache": "down"}) == "degraded"


def test_headline_names_what_is_down():
    assert headline({"api": "ok", "cache": "down"}) == "Degraded: cache is down"


def test_render_lists_every_check():
    page = render({"api": "ok", "cache": "down"})
    assert "<li>api: ok</li>" in page and "<li>cache: down</li>" in page
