"""Incident-response helpers for web-3: the containment and IOC check."""
