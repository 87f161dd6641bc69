"""payments-gateway: the shop's card payments, sent to the acquirer under its settings."""
