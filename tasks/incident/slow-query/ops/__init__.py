"""On-call tooling for the shop database."""
