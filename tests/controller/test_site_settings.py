"""A site profile's drain margin reaches the controller when no settings are given."""

from __future__ import annotations

from parsl.providers import LocalProvider

from parsl_malleable.controller.live import site_settings
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.provider import BackfillProvider


def test_the_profile_margin_is_used_and_the_default_otherwise() -> None:
    emulated = BackfillProvider("emulated", autostart=False)
    plain = BackfillProvider("example-slurm", autostart=False)
    try:
        assert site_settings(emulated).drain_margin_s == 2.0
        assert plain.profile.drain_margin_s is None
        assert site_settings(plain).drain_margin_s == 30.0
    finally:
        emulated.close()
        plain.close()
    assert site_settings(LocalProvider()).drain_margin_s == 30.0  # it has no site profile
    assert site_settings(None).drain_margin_s == 30.0


def test_min_block_auto_follows_the_measured_start_up() -> None:
    profile = load_profile("local-slurm")
    assert profile.min_block_s == "auto"
    assert profile.block_floor_s(profile.startup_s) == 120.0  # 4 x 30 s assumed
    assert profile.block_floor_s(7.0) == 60.0  # 28 s, rounded up to the 60 s grain
    assert profile.block_floor_s(100.0) == 420.0
    assert profile.block_floor_s(10_000.0) == profile.max_walltime_s
