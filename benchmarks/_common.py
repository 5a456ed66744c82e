"""Helpers shared by benchmark scripts: where their data lives, peak memory."""

from __future__ import annotations

import resource
from pathlib import Path

from parsl_malleable import data

REPO = Path(__file__).resolve().parents[1]


def data_file(name: str) -> Path:
    """A data file the project carries (``parsl_malleable/data``), by name: ``theta_2022.swf``
    finds the gzipped ``traces/theta_2022.swf.gz``, which every reader reads directly."""
    return data.path(name)


def workload_dir() -> Path:
    """The folder of the FreeTrain/BFTrainer workloads and the Summit idle trace (gzipped CSVs)."""
    return data.data_dir() / "bftrainer"


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
