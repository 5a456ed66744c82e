"""A job's registration wakes the provider's poll: the blocks a new job wants go out when it
comes, not up to a poll interval later."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from parsl_malleable.harvest.demand import DemandContext
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.emulated import EmulatedSite

from .conftest import wait_for as poll_until
from .test_block_deadline import STUBBORN, _trace

wait_for = functools.partial(poll_until, step_s=0.1)
POLL_S = 300.0  # far longer than the test waits: only a wake can submit in time


def test_demand_changed_polls_at_once_and_submits_the_blocks_now_wanted(tmp_path: Path) -> None:
    profile = load_profile("emulated").with_overrides(
        emulated={"nodes": 2, "trace": _trace(tmp_path / "t.swf"), "speedup": 1.0,
                  "start_s": 0, "kill_grace_s": 1},
        poll_interval_s=POLL_S,
        watch_interval_s=None,
        min_block_s=2,
        max_nodes_per_block=1,
    )  # fmt: skip
    wanted = [0]

    def demand(_context: DemandContext) -> int:
        return wanted[0]

    provider = BackfillProvider(
        profile,
        scheduler=EmulatedSite.from_profile(profile),
        script_dir=str(tmp_path / "blocks"),
        recycle=False,
        slots=1,
        demand=demand,
    )
    try:
        provider.submit(STUBBORN, 1, "parsl.htex.block-0")
        assert wait_for(lambda: provider.polls >= 1, 30)  # the first poll: nothing wanted
        assert provider.history() == []
        wanted[0] = 1
        woke = time.time()
        provider.demand_changed()
        assert wait_for(lambda: provider.history() != [], 30), provider.polls
        (record,) = provider.history()
        assert record.submitted_at - woke < 30 < POLL_S  # the wake's poll, not the interval's
    finally:
        provider.close()
        assert isinstance(provider.scheduler, EmulatedSite)
        provider.scheduler.close()
