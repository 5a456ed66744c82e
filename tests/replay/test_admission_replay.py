"""Admission in the replay: with no cap the allocator decides how many of a backlog run."""

from __future__ import annotations

import math
from dataclasses import replace

from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.policies import make_policy
from parsl_malleable.replay.scenario import hpo_sweep, summit_timeline


def test_a_backlog_with_no_cap_trains_more_than_a_fixed_cap_and_runs_more_jobs():
    timeline = summit_timeline(200, 0.25)
    jobs = [replace(j, submit=timeline.t0) for j in hpo_sweep(timeline, 200, samples=math.inf)]
    capped = Replay(timeline, jobs, make_policy("ours"), max_jobs=2).run()
    free = Replay(timeline, jobs, make_policy("ours"), max_jobs=None).run()
    started = [j for j in free.jobs if j.first_start is not None]
    assert len([j for j in capped.jobs if j.first_start is not None]) <= 2
    # Two jobs cannot hold every idle node without pausing at every node event; many small
    # ones can, so admission starts more jobs than the cap allows and trains more.
    assert len(started) > 2
    assert free.trained > capped.trained
    assert free.trained <= free.upper_bound
    # Jobs never started hold nothing and train nothing; none is admitted before its submit.
    for job in free.jobs:
        if job.first_start is None:
            assert job.trained == 0 and job.node_seconds == 0
