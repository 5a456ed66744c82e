"""Block planning on hand-built snapshots, with the real window planner and block sizing."""

from __future__ import annotations

import json

from parsl_malleable.harvest.blocks_to_submit import harvest_windows, plan_blocks
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.schedulers.pbs import build_pbs_snapshot
from parsl_malleable.schedulers.pbs_parse import parse_pbs_vnodes, parse_qstat_queues, serve_queues
from parsl_malleable.windows.predict import WindowPredictor

from .snapshots import NOW, machine, native, queued

PROFILE = SiteProfile(
    safety_margin_s=60,
    min_block_s=60,
    max_nodes_per_block=2,
    max_walltime_s=3600,
    partition="harvest",
    poll_interval_s=10,
)
NAIVE = WindowPredictor(model=None, samples=0)


def test_blocks_fill_the_hole_and_end_before_the_reservation() -> None:
    # n1,n2 run until NOW+540; a 6-node job waits for them: n3..n6 are a 540 s hole.
    snap = machine([native("r1", ("n1", "n2"), 540)], [queued("big", 6, 600)])
    blocks = plan_blocks(snap, 4, PROFILE, NAIVE)
    assert sorted(n for b in blocks for n in b.node_ids) == ["n3", "n4", "n5", "n6"]
    for b in blocks:
        assert b.nodes <= PROFILE.max_nodes_per_block
        assert b.walltime_s % 60 == 0
        assert NOW + b.walltime_s <= NOW + 540 - PROFILE.safety_margin_s
        assert b.walltime_s == 480


def test_demand_caps_the_nodes() -> None:
    snap = machine([native("r1", ("n1", "n2"), 540)], [queued("big", 6, 600)])
    assert sum(b.nodes for b in plan_blocks(snap, 3, PROFILE, NAIVE)) == 3
    assert plan_blocks(snap, 0, PROFILE, NAIVE) == []


def test_short_hole_gives_no_block() -> None:
    # 100 s of hole minus a 60 s margin is less than min_block_s.
    snap = machine([native("r1", ("n1", "n2"), 100)], [queued("big", 6, 600)])
    assert plan_blocks(snap, 4, PROFILE, NAIVE) == []


def test_no_queued_job_gives_the_longest_block() -> None:
    snap = machine([native("r1", ("n1", "n2"), 100)])
    blocks = plan_blocks(snap, 4, PROFILE, NAIVE)
    assert {b.walltime_s for b in blocks} == {PROFILE.max_walltime_s}


def test_our_pending_blocks_are_not_queued_jobs() -> None:
    # Our own pending block must not close the hole it is meant to fill.
    snap = machine(
        [native("r1", ("n1", "n2"), 540)],
        [queued("big", 6, 600), queued("ours", 2, 300, ours=True)],
    )
    assert sum(b.nodes for b in plan_blocks(snap, 4, PROFILE, NAIVE)) == 4


def test_partition_and_exclusions() -> None:
    parts = {"n5": ("batch",), "n6": ("batch",)}
    snap = machine([native("r1", ("n1", "n2"), 540)], [queued("big", 6, 600)], partitions=parts)
    windows = harvest_windows(snap, PROFILE, NAIVE, exclude={"n3"})
    assert sorted(n for w in windows for n in w.nodes) == ["n4"]


def test_queued_job_that_starts_now_leaves_no_hole() -> None:
    # A 2-node job that fits now takes two idle nodes (the lowest ids): they are not holes.
    snap = machine([native("r1", ("n1", "n2"), 540)], [queued("small", 2, 300)])
    nodes = sorted(n for b in plan_blocks(snap, 6, PROFILE, NAIVE) for n in b.node_ids)
    assert nodes == ["n5", "n6"]


def test_a_learned_model_shortens_blocks_never_lengthens_them() -> None:
    import pandas as pd

    from parsl_malleable.windows.runtime_model import RuntimeRatioModel

    # History: every job used half of its limit.
    limits = [3600.0] * 60
    history = pd.DataFrame(
        {
            "start": [0.0] * 60,
            "end": [x / 2 for x in limits],
            "walltime": limits,
            "nodes": [2] * 60,
            "queue": ["batch"] * 60,
            "user": ["alice"] * 60,
        }
    )
    learned = WindowPredictor(model=RuntimeRatioModel.fit(history), samples=16)
    snap = machine([native("r1", ("n1", "n2"), 3540)], [queued("big", 6, 600)])
    naive = plan_blocks(snap, 4, PROFILE, NAIVE)
    shorter = plan_blocks(snap, 4, PROFILE, learned)
    assert {b.walltime_s for b in naive} == {3480.0}
    # r1 is expected to end halfway (1800 s after its start, 1740 s from now): the block
    # ends a margin before that, so a yield is unlikely.
    assert shorter and all(b.walltime_s <= 1740 - 60 for b in shorter)


def test_preemption_mode_plans_blocks_past_the_predicted_window() -> None:
    # The same 540 s hole: in polling mode blocks end 60 s before it; where Slurm preempts
    # blocks for native jobs they may run to max_walltime_s, and a block on a node the queue
    # takes now is still never planned.
    snap = machine([native("r1", ("n1", "n2"), 540)], [queued("big", 6, 600)])
    preempt = PROFILE.model_copy(update={"preemption": "partition"})
    blocks = plan_blocks(snap, 4, preempt, NAIVE)
    assert sorted(n for b in blocks for n in b.node_ids) == ["n3", "n4", "n5", "n6"]
    assert all(b.walltime_s == PROFILE.max_walltime_s for b in blocks)
    fits_now = machine([native("r1", ("n1", "n2"), 540)], [queued("small", 3, 600)])
    taken = {n for b in plan_blocks(fits_now, 4, preempt, NAIVE) for n in b.node_ids}
    assert len(taken) == 1  # three of the four idle nodes start the queued job at once


PBS = SiteProfile(
    scheduler="pbs",
    queue="workq",
    safety_margin_s=60,
    min_block_s=60,
    max_nodes_per_block=2,
    max_walltime_s=3600,
    poll_interval_s=10,
)


def test_no_block_is_planned_on_a_node_its_queue_cannot_use() -> None:
    # PBS: n1 and n2 are bound to queue otherq (only its jobs run there); n3..n6 serve workq,
    # the blocks' queue. Such a block stayed queued ("Can Never Run") until it was withdrawn,
    # and the next poll planned the same again.
    parts = {"n1": ("otherq",), "n2": ("otherq",)} | {f"n{i}": ("workq",) for i in range(3, 7)}
    snap = machine([], partitions=parts)
    planned = sorted(n for b in plan_blocks(snap, 6, PBS, NAIVE) for n in b.node_ids)
    assert planned == ["n3", "n4", "n5", "n6"]
    # Blocks to otherq go to its nodes only; with a queue no node serves, none is planned.
    to_other = PBS.model_copy(update={"queue": "otherq"})
    assert sorted(n for b in plan_blocks(snap, 6, to_other, NAIVE) for n in b.node_ids) == [
        "n1",
        "n2",
    ]
    assert plan_blocks(snap, 6, PBS.model_copy(update={"queue": "nowhere"}), NAIVE) == []


def test_without_a_queue_blocks_go_where_the_default_queue_may_run() -> None:
    # qsub without -q sends a block to the server's default queue (PBSScheduler reads it).
    parts = {"n1": ("otherq",), "n2": ("otherq",)} | {f"n{i}": ("workq",) for i in range(3, 7)}
    snap = machine([], partitions=parts)
    snap.default_partition = "workq"
    anywhere = PBS.model_copy(update={"queue": None})
    planned = sorted(n for b in plan_blocks(snap, 6, anywhere, NAIVE) for n in b.node_ids)
    assert planned == ["n3", "n4", "n5", "n6"]


def test_a_pbs_snapshot_of_a_bound_node_gets_no_block() -> None:
    # The same through the PBS adapter's own reading: pbsnodes with queue=otherq on node01,
    # the queues' settings from qstat -Q (otherq has bound vnodes).
    nodes = {"nodes": {f"node0{i}": {"state": "free"} for i in range(1, 4)}}
    nodes["nodes"]["node01"]["queue"] = "otherq"
    queues = parse_qstat_queues(
        json.dumps({"Queue": {"workq": {}, "otherq": {"hasnodes": "True"}}})
    )
    served = serve_queues(parse_pbs_vnodes(json.dumps(nodes)), queues)
    snap = build_pbs_snapshot(NOW, served, [])
    planned = {n for b in plan_blocks(snap, 6, PBS, NAIVE) for n in b.node_ids}
    assert planned == {"node02", "node03"}
