"""A rank whose block gets Slurm's preemption notice (SIGTERM to every task) leaves at a commit.

Slurm preempts a block in preemption mode by sending SIGTERM to all its processes, then kills
them after the partition's GraceTime. The rank catches the SIGTERM, tells the coordinator it is
leaving, and the group re-forms without it at the next check: a planned change at a commit,
with no rollback and nothing lost, instead of a dead peer; then its process ends (the agent
ends it), so the block does not hold the node until the scheduler's kill. Blocks here are real
Parsl HTEX worker pools (LocalProvider); the test signals one pool's whole process group,
manager and worker alike, as Slurm does.
"""

from __future__ import annotations

import os
import signal

import parsl
import pytest

from parsl_malleable.app import malleable_app
from tests.elastic import elastic_scenario as sc


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_a_rank_told_by_sigterm_leaves_at_a_commit_without_rollback(tmp_path) -> None:
    sc.environment_ready()
    parsl.load(sc.htex_config(tmp_path / "runinfo", init_blocks=2))
    try:
        app = malleable_app(
            checkpoint_dir=str(tmp_path / "ckpt"),
            min_nodes=1,
            max_nodes=2,
            checkpoint_every=1000,
            collective_timeout_s=15,
            settle_s=3.0,
        )(sc.train_paced)
        pace = tmp_path / "pace"
        pace.touch()
        job = app.submit(pace_file=str(pace), step_delay_s=0.1, epochs=30, batch_size=32, lr=0.02)
        sc.wait_size(job, 2, progress=3)
        target = job.coordinator.current_members()[1]
        os.killpg(os.getpgid(target.pid), signal.SIGTERM)

        def left(c) -> bool:
            return any(
                e["event"] in ("left", "lost") and e.get("member") == target.member_id
                for e in c.events()
            )

        assert job.coordinator.wait_for(left, 90), job.coordinator.events()
        events = job.coordinator.events()
        kinds = [(e["event"], e.get("member")) for e in events]
        assert ("left", target.member_id) in kinds, kinds
        # A planned leave: the peer was never lost and the group never rolled back.
        assert ("lost", target.member_id) not in kinds, kinds
        assert not any(e["event"] == "rollback" for e in events), kinds

        # A group without it formed after the leave and went on training.
        me = target.member_id
        # From its notice on (the coordinator marks it leaving, "drain"): the group may re-form
        # before the rank's own "left" arrives.
        left_at = next(
            e["time"]
            for e in events
            if (e["event"] == "drain" and me in e.get("members", ()))
            or (e["event"] == "left" and e.get("member") == me)
        )

        def trains_without(c) -> bool:
            return any(
                e["start_step"] is not None
                and target.member_id not in e["members"]
                and e["formed_at"] >= left_at
                for e in c.epochs()
            )

        assert job.coordinator.wait_for(trains_without, 90), job.coordinator.epochs()
        # Its process ended once the rank had left, as a preempted block's must: a process
        # that lingered until the scheduler's kill kept the native job waiting that long.
        assert job.coordinator.wait_for(lambda _: process_gone(target.pid), 30), target.pid
        pace.unlink()
        assert job.future is not None
        result = job.future.result(timeout=240)
        assert result["steps"] > 0
    finally:
        parsl.dfk().cleanup()
