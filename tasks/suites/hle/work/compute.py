"""The HLE-like suite's checking computations: each question's answer, computed from scratch.

``python compute.py q01`` prints the answer; ``--expect VALUE`` exits 1 unless it matches (the
task's success check). Real computation (brute force, sieves, recurrences), each well under a
second or two, so the tool time of a question is what a verification script really takes.
"""

from __future__ import annotations

import argparse
import sys
from math import isqrt


def taxicab() -> int:
    """Smallest number that is a sum of two positive cubes in two different ways."""
    seen: dict[int, int] = {}
    best = None
    for a in range(1, 40):
        for b in range(a, 40):
            n = a ** 3 + b ** 3
            seen[n] = seen.get(n, 0) + 1
            if seen[n] == 2 and (best is None or n < best):
                best = n
    assert best is not None
    return best


def primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[0:2] = b"\x00\x00"
    for p in range(2, isqrt(n) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(range(p * p, n, p)))
    return [i for i, v in enumerate(sieve) if v]


def derangements(n: int) -> int:
    a, b = 1, 0  # D(0), D(1)
    for k in range(2, n + 1):
        a, b = b, (k - 1) * (a + b)
    return b if n else a


def partitions(n: int) -> int:
    ways = [1] + [0] * n
    for part in range(1, n + 1):
        for total in range(part, n + 1):
            ways[total] += ways[total - part]
    return ways[n]


QUESTIONS = {
    "q01": taxicab,
    "q02": lambda: len(primes_below(100_000)),
    "q03": lambda: sum(map(int, str(2 ** 1000))),
    "q04": lambda: derangements(10),
    "q05": lambda: partitions(50),
    "q06": lambda: primes_below(200_000)[10_000],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("question", choices=sorted(QUESTIONS))
    ap.add_argument("--expect", help="exit 1 unless the answer is this")
    args = ap.parse_args()
    answer = str(QUESTIONS[args.question]())
    print(answer)
    if args.expect is not None and args.expect != answer:
        print(f"expected {args.expect}, computed {answer}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
