"""What the controller tells the driver's watchdog for each kind of provider (the watchdog
process itself is tested in tests/test_watchdog.py; nothing is started here)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from parsl.providers import LocalProvider, SlurmProvider

from parsl_malleable.controller.driver_cleanup import track_executor
from parsl_malleable.watchdog import Watchdog


def test_a_local_providers_blocks_are_watched_as_process_groups() -> None:
    block = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        provider = LocalProvider()
        provider.resources["1"] = {"job_id": "1", "remote_pid": block.pid}
        provider.resources["2"] = {"job_id": "2", "remote_pid": block.pid, "cancelled": True}
        watchdog = Watchdog()
        track_executor(watchdog, SimpleNamespace(label="x", provider=provider))
        assert [pid for pid, _ in watchdog.state()["groups"]] == [block.pid]
        provider.resources.pop("1")  # the block ended: forgotten
        track_executor(watchdog, SimpleNamespace(label="x", provider=provider))
        assert watchdog.state()["groups"] == []
    finally:
        block.kill()
        block.wait()


def test_parsl_batch_providers_jobs_are_cancelled_with_their_command() -> None:
    provider = SlurmProvider()
    provider.resources["101"] = {"job_id": "101"}
    provider.resources["102"] = {"job_id": "102", "cancelled": True}
    watchdog = Watchdog()
    track_executor(watchdog, SimpleNamespace(label="slurm", provider=provider))
    assert watchdog.state()["jobs"] == [[["scancel"], ["101"]]]


def test_a_backfill_providers_unconfirmed_ids_are_never_cancelled_blind() -> None:
    blocks = [
        SimpleNamespace(job_id="7", id_checked=True),
        SimpleNamespace(job_id="8", id_checked=False),  # may be another job's id
    ]
    provider = SimpleNamespace(profile=SimpleNamespace(scheduler="pbs"), blocks=lambda: blocks)
    watchdog = Watchdog()
    track_executor(watchdog, SimpleNamespace(label="h", provider=provider))
    assert watchdog.state()["jobs"] == [[["qdel"], ["7"]]]
