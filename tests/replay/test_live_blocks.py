"""Nodes served as the live provider serves them (``block_walltime_s``): holes cut into blocks
of the profile's walltime, each a new start, and deadlines the controller plans with."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import IdleTimeline, as_blocks
from parsl_malleable.replay.policies import make_policy
from parsl_malleable.replay.workload import Physics, ReplayJob

LINEAR = ScalingCurve((0, 1, 8), (0.0, 10.0, 80.0))
# The runtime's physics with round figures: 10 s start-up, 2 s regroup, 5 s leave.
RT = Physics(startup_s=10.0, regroup_s=2.0, leave_s=5.0)


def timeline(rows: list[tuple[int, float, float]], t1: float = 10_000.0) -> IdleTimeline:
    node, start, end = (np.array(x, dtype=float) for x in zip(*rows, strict=True))
    names = tuple(f"n{i}" for i in range(int(node.max()) + 1))
    return IdleTimeline.build(names, node.astype(int), start, end, "hand", 0.0, t1)


def test_a_hole_is_cut_into_back_to_back_blocks_of_the_walltime() -> None:
    tl = timeline([(0, 0.0, 1300.0), (0, 2000.0, 2100.0), (1, 5.0, 605.0)])
    blocks = as_blocks(tl, 600.0)
    rows = list(zip(blocks.node.tolist(), blocks.start.tolist(), blocks.end.tolist(), strict=True))
    assert rows == [
        (0, 0.0, 600.0),
        (0, 600.0, 1200.0),
        (0, 1200.0, 1300.0),
        (0, 2000.0, 2100.0),
        (1, 5.0, 605.0),  # exactly one walltime: one block
    ]
    assert blocks.idle_node_seconds() == pytest.approx(tl.idle_node_seconds())
    assert "blocks of at most 600 s" in blocks.source
    with pytest.raises(ValueError, match="walltime_s"):
        as_blocks(tl, 0.0)


def test_each_new_block_is_a_new_start_for_the_job_on_it() -> None:
    """One node idle 0-1000 s, blocks of 400 s: the job starts three times (start-up and regroup
    each), where the hole as one interval costs it one start."""
    tl = timeline([(0, 0.0, 1000.0)], t1=1000.0)
    job = ReplayJob("j", LINEAR, 1, 8, 0.0, 0.0, 1e9, 0.0)
    whole = Replay(tl, [job], make_policy("ours"), physics=RT).run().jobs[0]
    blocks = Replay(tl, [job], make_policy("ours"), physics=RT, block_walltime_s=400.0).run()
    (cut,) = blocks.jobs
    # A start: start-up and regroup (12 s), and the controller's reaction to the first block.
    start = 1000.0 - whole.trained / 10.0
    assert 12.0 <= start < 15.0
    lost = 1000.0 - cut.trained / 10.0
    assert 3 * 12.0 <= lost <= 3 * start


class DeadlineSpy(Replay):
    """Records the deadline the controller is given for every block that appears."""

    seen: list[tuple[float, float | None]]

    def _node_arrives(self, name: str) -> None:
        super()._node_arrives(name)
        self.seen = [*getattr(self, "seen", []), (self.now, self.core.blocks[name].deadline)]


def test_the_controller_plans_with_each_blocks_deadline_not_the_holes_end() -> None:
    """Live, the controller cannot see when the native comes: it knows the block's deadline.
    A replay in this mode gives it the same, never the hole's end, and no history windows."""
    tl = timeline([(0, 0.0, 1000.0), (0, 1500.0, 1700.0)], t1=2000.0)
    job = ReplayJob("j", LINEAR, 1, 8, 0.0, 0.0, 1e9, 0.0)
    spy = DeadlineSpy(tl, [job], make_policy("ours"), physics=RT, block_walltime_s=400.0)
    spy.run()
    assert spy.seen == [(0.0, 400.0), (400.0, 800.0), (800.0, 1200.0), (1500.0, 1900.0)]
    assert spy.history is None
    default = DeadlineSpy(tl, [job], make_policy("ours"), physics=RT)
    default.run()
    assert [deadline for _, deadline in default.seen] == [None, None]
    assert default.history is not None
