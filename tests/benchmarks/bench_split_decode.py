"""Benchmark: would the fast cold builder gain from decoding half a trace in a second process?

Run as ``python tests/benchmarks/bench_split_decode.py TRACE [ROUNDS]`` on a big trace (the
1,000,001-span one that ``bench_analysis.py`` writes, or any). An experiment for issue 27, not
the builder: it times what the split would overlap, msgspec's decode of the span records into
the builder's Structs (:mod:`agentloop.analysis._fastshape`) and one pass taking a column from
them, with the records then freed,

- in one process (the builder today), and
- split at a record boundary near the middle (``}\\n{"type":"``): a worker process decodes the
  second half (reading its bytes from the file) while this one decodes the first, for each
  start method (``fork``: not after threads have started, and the CLI builds in
  ``asyncio.to_thread``; ``spawn`` and ``forkserver``: a fresh interpreter imports the modules,
  overlapped with this process's half).

Each variant runs in a fresh process, the variants taking turns ``ROUNDS`` times; the load
average is printed beside (the machine is shared). What it leaves out: sending the worker's
columns back (numpy arrays: a pickle through a pipe) and joining them.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentloop.analysis import _fastshape as F  # noqa: E402

WAYS = ("one", "fork", "spawn", "forkserver")


def decode(path: str, lo: int, hi: int) -> tuple[int, float]:
    """Records decoded from ``path``'s bytes ``lo:hi``, and the seconds taken by the decode,
    a pass taking each record's id and freeing them."""
    gc.disable()
    with open(path, "rb") as f:
        f.seek(lo)
        data = f.read(hi - lo)
    t = time.perf_counter()
    recs = F.decoder().decode_lines(data)
    ids = [getattr(r, "id", None) for r in recs]
    n = len(recs)
    del recs, ids
    return n, time.perf_counter() - t


def one_way(way: str, path: str) -> float:
    """Seconds from reading the trace to both halves decoded (or the whole, ``one``)."""
    gc.disable()
    t = time.perf_counter()
    data = Path(path).read_bytes()
    head, stop = data.find(b"\n") + 1, len(data) - data.endswith(b"\n")
    if way == "one":
        decode(path, head, stop)
        return time.perf_counter() - t
    mid = data.find(b'}\n{"type":"', (head + stop) // 2) + 2
    with mp.get_context(way).Pool(1) as pool:
        theirs = pool.apply_async(decode, (path, mid, stop))
        decode(path, head, mid)
        theirs.get(timeout=300)
    return time.perf_counter() - t


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    if sys.argv[1:2] == ["--way"]:  # a child of the rounds below
        print(one_way(sys.argv[2], sys.argv[3]))
        return
    path, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    seen: dict[str, list[float]] = {w: [] for w in WAYS}
    load0 = load_average()
    for _ in range(rounds):
        for way in WAYS:
            out = subprocess.run(
                [sys.executable, __file__, "--way", way, path],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            seen[way].append(float(out))
    print(
        f"{path}: read + decode + one column pass + free; load average {load0:.2f} -> "
        f"{load_average():.2f}; fresh processes, {rounds} rounds taking turns"
    )
    for way, runs in seen.items():
        print(
            f"  {way:10s} best {min(runs):5.2f} s ({min(runs) / min(seen['one']):.2f}x one; runs "
            f"{', '.join(f'{r:.2f}' for r in runs)})"
        )


if __name__ == "__main__":
    main()
