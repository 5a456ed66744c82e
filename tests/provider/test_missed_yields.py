"""Reclaims on the emulated site: a yield the provider missed, or a start no poll could foresee.

The README demo's native job 5 took block b2's node at the instant native job 1 ended, 552 s
(wall) before its limit: every plan made from the queue until then, the site's own limits
included, put job 5 on other nodes 100 s later, so no poll could have yielded b2 in time. The
site and the provider count that as unforeseeable, not as a missed yield; a native whose start
the queue already allowed at the last look is still a miss.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from parsl_malleable.harvest.ledger import JobRecord, Phase
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.harvest.warmup import load_planner
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.emulated.native_load import NativeJob, NativeSchedule
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.windows.predict import WindowPredictor
from tests.provider.conftest import wait_for as poll_until

PATH = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
wait_for = functools.partial(poll_until, step_s=0.05)
MakeSite = Callable[..., EmulatedSite]


def schedule(nodes: int, *jobs: tuple[str, int, float, float, float, float]) -> NativeSchedule:
    """Natives ``(id, size, queued, start, end, limit end)`` in wall seconds from now."""
    t0 = time.time()
    natives = tuple(
        NativeJob(j, k, t0 + q, t0 + s, t0 + e, lim - s)
        for j, k, q, s, e, lim in sorted(jobs, key=lambda x: x[3])
    )
    return NativeSchedule(natives, t0, 0.0, 1.0, nodes)


@pytest.fixture
def sites() -> Iterator[MakeSite]:
    made: list[EmulatedSite] = []

    def make(plan: NativeSchedule) -> EmulatedSite:
        site = EmulatedSite(EmulatedSettings(nodes=plan.nodes), schedule=plan)
        made.append(site)
        return site

    yield make
    for site in made:
        site.close()


def test_a_native_the_last_look_allowed_is_a_missed_yield(sites: MakeSite, tmp_path: Path) -> None:
    # vn1 busy until 1 s, its limit; a 2-node native is queued at 0.5 s and starts at 2 s.
    # Every look from 0.5 s on showed room for it by then: nobody yields, so a miss.
    site = sites(schedule(2, ("a", 1, 0, 0, 1, 1), ("big", 2, 0.5, 2.0, 600, 630)))
    path = tmp_path / "block.sh"
    path.write_text("#!/bin/bash\nsleep 300 & wait\n")
    job = site.submit(path, nodes=1, walltime_s=60, node_ids=["vn2"], name="pm-block-m")
    # Looks at the queue (snapshots) all along, as a provider that never yields would.
    assert wait_for(lambda: bool(site.snapshot()) and site.reclaim_count == 1, 10)
    (reclaim,) = site.reclaims
    assert (reclaim.native_id, reclaim.block_id) == ("big", job)
    assert reclaim.foreseeable, reclaim.why
    assert "showed it queued" in reclaim.why
    assert (site.missed_count, site.unforeseeable_count) == (1, 0)


def test_an_early_end_that_starts_a_native_on_a_block_is_unforeseeable(
    sites: MakeSite, tmp_path: Path
) -> None:
    # The demo's job 5, on 4 nodes: "one" (vn1) ends at 10 s, 590 s before its limit; "two"
    # (vn2, vn3) has its limit at 60 s; "five" (2 nodes) is queued from the start. By the
    # limits "five" starts at 60 s on vn2 and vn3, so our block on vn4 is in nobody's way;
    # one's early end lets it start at 10 s on vn1 and vn4 at once.
    profile = load_profile("emulated")
    load_planner(profile, WindowPredictor(model=None, samples=0))  # compiled before the clock
    site = sites(
        schedule(
            4,
            ("one", 1, -5, -5, 10, 600),
            ("two", 2, -5, -5, 50, 60),
            ("five", 2, -1, 10, 10.5, 12),
        )
    )
    five = next(j for j in site.schedule.jobs if j.job_id == "five")
    provider = BackfillProvider(
        profile, scheduler=site, slots=1, script_dir=str(tmp_path / "blocks"), env=PATH
    )
    try:
        provider.submit("sleep 600", 1, "parsl.htex.block-0")

        def running() -> list[str]:
            return [b.job_id for b in provider.blocks() if b.phase is Phase.RUNNING]

        assert wait_for(lambda: running() != [], 8), provider.last_report
        (block,) = running()
        assert site.status([block])[block].nodes == ("vn4",)
        assert time.time() < five.start - profile.poll_interval_s  # polls saw it running

        assert wait_for(lambda: site.reclaim_count > 0, five.start - time.time() + 10)
        (reclaim,) = site.reclaims
        assert (reclaim.native_id, reclaim.block_id, reclaim.nodes) == ("five", block, ("vn4",))
        assert not reclaim.foreseeable, reclaim.why
        assert "native job one ended" in reclaim.why
        assert (site.missed_count, site.unforeseeable_count) == (0, 1)

        def record() -> JobRecord:
            return next(r for r in provider.history() if r.job_id == block)

        assert wait_for(lambda: record().end_state is not None, 10), provider.last_report
        assert record().cancel_reason is None  # no poll had a reason to yield it
        assert site.status([block])[block].state is JobState.PREEMPTED
        assert provider.faults["reclaims_unforeseeable"] == 1
        assert provider.faults["reclaims_missed"] == 0
    finally:
        provider.close()
