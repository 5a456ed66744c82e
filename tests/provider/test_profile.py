"""Site profiles: every shipped profile loads; mistakes name the file, line or key."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import (
    REPO_PROFILES,
    SiteProfile,
    find_profile,
    load_profile,
)


@pytest.mark.parametrize("path", sorted(REPO_PROFILES.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_profiles_load(path: Path) -> None:
    profile = load_profile(path)
    assert profile.name == path.stem
    assert profile.yield_grace_s < profile.poll_interval_s


def test_profile_by_name_and_by_env_folder(tmp_path: Path, monkeypatch) -> None:
    assert find_profile("slurm-test") == REPO_PROFILES / "slurm-test.yaml"
    (tmp_path / "mysite.yaml").write_text(
        "name: mysite\npartition: scavenger\nmax_harvested_nodes: 3\n"
    )
    monkeypatch.setenv("PM_PROVIDER_PROFILES", str(tmp_path))
    profile = load_profile("mysite")
    assert (profile.partition, profile.max_harvested_nodes) == ("scavenger", 3)


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("partition: harvest\npoll_intervall_s: 10\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml: poll_intervall_s: Extra inputs"):
        load_profile(path)


def test_bad_value_names_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("max_harvested_nodes: -2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: max_harvested_nodes: .*greater than or eq"):
        load_profile(path)


def test_yield_grace_must_fit_in_a_poll(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text("poll_interval_s: 10\nyield_grace_s: 10\n")
    with pytest.raises(ConfigError, match=r"yield_grace_s .* shorter than poll_interval_s"):
        load_profile(path)


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("partition: harvest\nqos: [standby\nmax_harvested_nodes: 3\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml:\d+: not valid YAML"):
        load_profile(path)


def test_not_a_mapping_and_missing_profile(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_profile(path)
    with pytest.raises(ConfigError, match=r"no nosuchsite\.yaml in"):
        load_profile("nosuchsite")


def test_overrides_are_validated() -> None:
    base = SiteProfile()
    assert base.with_overrides(max_harvested_nodes=2).max_harvested_nodes == 2
    with pytest.raises(ConfigError, match=r"min_nodes_per_block .* > max_nodes_per_block"):
        base.with_overrides(min_nodes_per_block=8, max_nodes_per_block=2)


def test_preemption_mode_needs_a_slurm_partition_or_qos() -> None:
    with pytest.raises(ConfigError, match=r"preemption: partition needs `partition:`"):
        SiteProfile().with_overrides(preemption="partition")
    with pytest.raises(ConfigError, match=r"preemption: qos needs `qos:`"):
        SiteProfile(partition="p").with_overrides(preemption="qos")
    with pytest.raises(ConfigError, match=r"is for scheduler: slurm"):
        SiteProfile(scheduler="pbs", queue="q").with_overrides(preemption="partition")
    ok = SiteProfile(qos="standby").with_overrides(preemption="qos", preempt_grace_s=60)
    assert ok.preemption == "qos" and ok.preempt_grace_s == 60


def test_the_dead_man_switch_must_end_blocks_within_a_minute() -> None:
    # The watchdog checks every 5 s and gives the workers 2 s after TERM: 50 s keeps it < 60.
    with pytest.raises(ConfigError, match="driver_timeout_s"):
        SiteProfile().with_overrides(driver_timeout_s=55)
    assert SiteProfile().driver_timeout_s == 30
    assert SiteProfile().reservations  # read by default: admin intent wins


def test_a_renamed_key_is_refused_with_its_new_name(tmp_path: Path) -> None:
    """``heartbeat_timeout_s`` (the block's dead-man switch) is ``driver_timeout_s`` now: an old
    profile is told the new name, not silently given the default."""
    path = tmp_path / "old.yaml"
    path.write_text("partition: harvest\nheartbeat_timeout_s: 20\n")
    with pytest.raises(ConfigError, match="heartbeat_timeout_s was renamed driver_timeout_s"):
        load_profile(str(path))
    path.write_text("partition: harvest\ndriver_timeout_s: 20\n")
    assert load_profile(str(path)).driver_timeout_s == 20


def test_the_site_cap_under_its_old_name_is_refused(tmp_path: Path) -> None:
    """``max_nodes`` is a job's own cap; the site's cap on harvested nodes is another setting."""
    path = tmp_path / "old.yaml"
    path.write_text("max_nodes: 8\n")
    with pytest.raises(ConfigError, match="max_nodes was renamed max_harvested_nodes: write "
                       "max_harvested_nodes: 8"):  # fmt: skip
        load_profile(path)
    with pytest.raises(ConfigError, match="max_nodes was renamed max_harvested_nodes"):
        SiteProfile().with_overrides(max_nodes=2)
