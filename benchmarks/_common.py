"""Helpers shared by benchmark scripts: where the shared data lives, peak memory."""

from __future__ import annotations

import os
import resource
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The shared data folder: $PARSL_MALLEABLE_SHARED, else ``../shared`` beside the checkout."""
    env = os.environ.get("PARSL_MALLEABLE_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
