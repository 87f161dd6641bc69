"""Order totals: the sum of each line's unit price times its quantity, in the order's currency."""


def order_total(order: dict) -> dict:
    """The total of one order as the order page shows it."""
    cents = sum(line["unit_cents"] * line["qty"] for line in order["lines"])
    return {"order_id": order["id"], "total_cents": cents, "currency": order["currency"]}
