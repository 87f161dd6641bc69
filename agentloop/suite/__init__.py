"""Suites: many tasks and repeats run concurrently, their report, compare and what-if at suite level."""
