"""Every site profile shipped in providers/ loads, by name, and keeps its own invariants."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsl_malleable.harvest.site_profile import load_profile

PROFILES = sorted((Path(__file__).resolve().parents[2] / "providers").glob("*.yaml"))


def test_the_documented_sites_are_shipped() -> None:
    names = {p.stem for p in PROFILES}
    assert {"polaris", "aurora", "perlmutter", "frontier", "local-slurm"} <= names


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profile_loads_by_name(path: Path) -> None:
    profile = load_profile(path.stem)
    assert profile.name == path.stem
    assert profile.yield_grace_s < profile.poll_interval_s
    assert profile.block_floor_s(profile.startup_s) <= profile.max_walltime_s
    if profile.scheduler == "pbs":
        assert profile.queue, "a PBS profile names the queue its blocks go to"
