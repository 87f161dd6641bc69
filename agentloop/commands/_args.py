"""Argument types shared by the subcommands: numbers that must be positive say so (exit 2)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer of at least 1 (``--max-steps 0`` is refused, not ignored)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def positive_float(text: str) -> float:
    """A number of seconds (or a factor) above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (got {text})")
    return value
