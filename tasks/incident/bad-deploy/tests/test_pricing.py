import json
from pathlib import Path

from app.pricing import order_total

ORDERS = json.loads((Path(__file__).resolve().parent.parent / "app" / "orders.json").read_text())


def test_every_known_order_has_a_total():
    assert [order_total(o)["order_id"] for o in ORDERS] == [1001, 1002, 1003, 1004, 1005]


def test_total_is_the_sum_of_lines_in_the_order_currency():
    assert order_total(ORDERS[1]) == {"order_id": 1002, "total_cents": 3400, "currency": "EUR"}
