"""Block sizing from allocations and predicted windows."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate import AllocationInputError, NodeWindow, allocate, size_blocks
from parsl_malleable.allocate.blocks import size_blocks_for_demand

from .helpers import linear_job


def test_blocks_follow_windows_with_margin_and_minimum():
    job = linear_job("j", 100.0, hi=6, up=10.0, down=5.0, current=("h0",))
    windows = [
        NodeWindow(("h0",), 3000.0),
        NodeWindow(("f0", "f1"), 1999.0),
        NodeWindow(("f2",), 1000.0),
        NodeWindow(("f3",), 140.0),
    ]
    alloc = allocate([job], ["f0", "f1", "f2", "f3"], windows, solver="greedy")
    assert set(alloc.added["j"]) == {"f0", "f1", "f2", "f3"}
    blocks = size_blocks(alloc, jobs=[job], startup_s=60.0, safety_margin_s=60.0)
    # f3: 140 - 60 = 80 s rounds down to 60 s < 60 + 10 + 5 s useful minimum: not requested.
    assert [(b.nodes, b.walltime_s, set(b.node_ids)) for b in blocks] == [
        (2, 1920.0, {"f0", "f1"}),
        (1, 900.0, {"f2"}),
    ]
    assert all(b.job == "j" for b in blocks)
    split = size_blocks(alloc, jobs=[job], max_nodes_per_block=1)
    assert [b.nodes for b in split] == [1, 1, 1]
    assert size_blocks(alloc, min_useful_s=1000.0)[0].walltime_s == 1920.0
    assert len(size_blocks(alloc, min_useful_s=1000.0)) == 1


def test_blocks_for_demand_take_longest_windows():
    windows = [NodeWindow(("a", "b"), 600.0), NodeWindow(("c", "d", "e"), 3600.0)]
    blocks = size_blocks_for_demand(4, windows, min_useful_s=300.0, granularity_s=300.0)
    assert [(b.nodes, b.walltime_s) for b in blocks] == [(3, 3300.0), (1, 300.0)]
    assert size_blocks_for_demand(4, windows, min_useful_s=400.0)[0].nodes == 3
    with pytest.raises(AllocationInputError, match="granularity_s"):
        size_blocks_for_demand(1, windows, min_useful_s=0, granularity_s=0)
