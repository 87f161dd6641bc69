"""Deploy tooling for orders-api: restart, smoke test, rollback verification."""
