"""The HLE-like suite's reference lookup: grep a local corpus, at a web search's latency.

``python search.py TERMS...`` prints the corpus lines containing every term. A question in the
seed's HLE runs looks things up with a search tool over the network; this stand-in answers from
``corpus.txt`` and waits SEARCH_LATENCY_S first, standing for a search call and the page
fetches behind it, so a question's tool time has the shape of the real runs (the value is the
suite's one free choice, explained in ../README.md). Nothing leaves the machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

SEARCH_LATENCY_S = 6.5


def main() -> int:
    terms = [t.lower() for t in sys.argv[1:]]
    time.sleep(SEARCH_LATENCY_S)
    lines = (Path(__file__).with_name("corpus.txt").read_text(encoding="utf-8").splitlines())
    hits = [ln for ln in lines if all(t in ln.lower() for t in terms)]
    print("\n".join(hits) if hits else "no results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
