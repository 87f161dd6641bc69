"""Plays deploy #812 onto the repository (setup only): totals converted to the shop's currency,
reading a field the orders do not have."""

from pathlib import Path

Path("app/pricing.py").write_text('''"""Order totals: the sum of each line's unit price times its quantity, in the shop's currency."""

SHOP_CURRENCY = "EUR"
RATES = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}  # to EUR, refreshed by deploy


def order_total(order: dict) -> dict:
    """The total of one order as the order page shows it, converted to the shop's currency."""
    cents = sum(line["unit_cents"] * line["qty"] for line in order["lines"])
    rate = RATES[order["currency_code"]]
    return {"order_id": order["id"], "total_cents": round(cents * rate),
            "currency": SHOP_CURRENCY}
''')
