"""The shop's SQLite database: migrations and seed data."""
