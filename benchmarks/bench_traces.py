"""Trace reader speed: the vectorised readers against a plain per-line baseline, same run.

Prints, per carried trace (gzipped: both sides decompress it), the best of ``--repeat`` wall
times of ``read_swf`` and of a straightforward per-row Python parser (``float()`` per field, one
dict per job: the design the reader avoids), and their ratio; the same for the Summit
idle-interval file against a bare
``pandas.read_csv`` (the floor: the reader adds validation and schema dtypes); and the time to
generate a 52k-job synthetic trace. Run: ``python benchmarks/bench_traces.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import data_file, peak_rss_mib

from parsl_malleable.traces import read_idle_intervals, read_swf, synthetic_trace
from parsl_malleable.traces._io import open_text

SWF_TRACES = ("theta_2022.swf", "UniLu-Gaia-2014-1.swf")
IDLE_FILE = "summit-idle-intervals-2021-02.csv.gz"


def best_of(repeat: int, work: Callable[[], object]) -> float:
    """Smallest wall time of ``repeat`` runs (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return min(times)


def per_row_swf(path: Path) -> pd.DataFrame:
    """Baseline: parse SWF one line at a time into dicts (gunzipped like the reader does)."""
    rows = []
    with open_text(path) as fh:
        for line in fh:
            if not line.strip() or line.lstrip().startswith(";"):
                continue
            f = [float(x) for x in line.split()[:18]]
            start = f[1] + f[2] if f[2] >= 0 else float("nan")
            rows.append(
                {
                    "job_id": int(f[0]),
                    "submit": f[1],
                    "start": start,
                    "end": start + f[3] if f[3] >= 0 else float("nan"),
                    "walltime": f[8] if f[8] >= 0 else float("nan"),
                    "nodes_req": int(f[7] if f[7] > 0 else f[4]),
                    "nodes": int(f[4] if f[4] > 0 else f[7]),
                    "user": str(int(f[11])),
                    "queue": str(int(f[14])),
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'input':28s} {'rows':>8s} {'reader s':>9s} {'baseline s':>11s} {'ratio':>6s}")
    for name in SWF_TRACES:
        path = data_file(name)
        rows = len(read_swf(path).jobs)
        ours = best_of(args.repeat, lambda p=path: read_swf(p))
        base = best_of(args.repeat, lambda p=path: per_row_swf(p))
        print(f"{name:28s} {rows:8d} {ours:9.3f} {base:11.3f} {ours / base:6.2f}")
    idle = data_file(IDLE_FILE)
    rows = len(read_idle_intervals(idle))
    ours = best_of(args.repeat, lambda: read_idle_intervals(idle))
    base = best_of(args.repeat, lambda: pd.read_csv(idle))
    print(f"{'summit idle intervals':28s} {rows:8d} {ours:9.3f} {base:11.3f} {ours / base:6.2f}")
    gen = best_of(args.repeat, lambda: synthetic_trace(52_000, 4_360, seed=0))
    print(f"synthetic_trace(52,000 jobs, 4,360 nodes): {gen:.3f} s")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
