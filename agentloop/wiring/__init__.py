"""A run's wiring behind the API: its configuration, model clients, set-up and execution."""
