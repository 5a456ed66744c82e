"""Idle-hole figures of an emulated site profile's native schedule (no Parsl, no processes).

    python benchmarks/emulated_figures.py [--profile emulated] [--minutes 4]

Simulates the profile's native trace as the emulated site does and prints, over the first
minutes of wall time: the idle share of node-time, the per-node idle holes (wall seconds) and
how many native jobs arrive, start and end. Used to tune ``providers/emulated.yaml``.
"""

from __future__ import annotations

import argparse
import logging
import time

from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.schedulers.emulated.figures import native_figures
from parsl_malleable.schedulers.emulated.native_load import native_schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="emulated", help="profile name or YAML path")
    parser.add_argument("--minutes", type=float, default=4.0, help="wall-time window")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    profile = load_profile(args.profile)
    if profile.emulated is None:
        raise SystemExit(f"{args.profile}: not an emulated site profile")
    settings = profile.emulated
    began = time.perf_counter()
    schedule = native_schedule(settings, t0=0.0)
    built = time.perf_counter() - began
    figures = native_figures(schedule, args.minutes * 60.0)
    print(
        f"profile {profile.name}: {settings.nodes} nodes, trace {settings.trace} "
        f"(jobs {settings.jobs}, load {settings.load:g}, seed {settings.seed}), "
        f"speedup {settings.speedup:g}; schedule built in {built:.1f} s"
    )
    for line in figures.lines():
        print(f"  {line}")


if __name__ == "__main__":
    main()
