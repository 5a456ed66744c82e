"""Where agents and ranks reach the controller: never silently loopback for remote blocks."""

from __future__ import annotations

import pytest
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider, SlurmProvider

from parsl_malleable.controller.address import controller_address
from parsl_malleable.errors import ConfigError
from parsl_malleable.provider import BackfillProvider, harvest_executor


def test_local_blocks_use_loopback_and_an_explicit_address_wins():
    assert controller_address(HighThroughputExecutor(provider=LocalProvider())) == "127.0.0.1"
    executor = HighThroughputExecutor(provider=LocalProvider(), address="10.1.2.3")
    assert controller_address(executor) == "10.1.2.3"


def test_remote_blocks_without_an_address_are_refused_with_what_to_set():
    executor = HighThroughputExecutor(label="far", provider=SlurmProvider())
    with pytest.raises(ConfigError, match=r"executor 'far'.*set address= on harvest_executor"):
        controller_address(executor)
    backfill = HighThroughputExecutor(provider=BackfillProvider("perlmutter", autostart=False))
    with pytest.raises(ConfigError, match="'address:' in the site profile"):
        controller_address(backfill)


def test_the_site_profile_address_reaches_htex_and_the_controller():
    executor = harvest_executor(BackfillProvider("slurm-test", autostart=False))
    assert executor.address == "127.0.0.1"
    assert controller_address(executor) == "127.0.0.1"
    gpu = harvest_executor(BackfillProvider("polaris", autostart=False), address="10.0.0.1")
    assert gpu.max_workers_per_node == 4 and gpu.available_accelerators == ["0", "1", "2", "3"]
