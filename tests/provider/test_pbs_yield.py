"""A yield on PBS with real torch ranks: they leave at a commit, and the block ends CANCELLED.

The site is ``fake_pbs.FakePBS``, whose MoM runs each block as pbs_mom does: a login shell in a
session of its own runs the block script, ``qsig`` signals every process of that session, and
when the shell has gone the rest of the session is killed. Blocks are the real thing on top:
``BackfillProvider`` (PBS profile) under a Parsl HTEX with its worker pools, a malleable app
whose two torch ranks train on the two blocks, and the controller that drains the ranks of a
block that yields. An administrator takes one vnode offline: its block yields. The rank there
must leave at a commit (no rank lost, no rollback) within ``yield_grace_s``, the block script's
trap must have run, and the job, deleted by the provider's qdel after the grace, ends CANCELLED.
With ``qsig -s USR1`` (before this adapter sent SIGURG) the notice itself ended the login
shell, and the MoM killed the rank with it: lost, and the block FAILED (exit status 266).
"""

from __future__ import annotations

from pathlib import Path

import parsl
import pytest
from parsl.config import Config
from parsl.jobs.states import JobState as P

from parsl_malleable.app import malleable_app
from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider, harvest_executor
from tests.elastic import elastic_scenario as sc

from .conftest import wait_for
from .fake_pbs import FakePBS

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_ranks_on_a_yielding_pbs_block_leave_at_a_commit_and_it_ends_cancelled(
    tmp_path: Path,
) -> None:
    sc.environment_ready()  # before the fake site copies PATH for its jobs
    pbs = FakePBS(tmp_path / "pbs", {"n1": {"state": "free"}, "n2": {"state": "free"}})
    profile = load_profile("example-pbs").with_overrides(
        queue="workq",
        reservations=False,
        min_block_s=60,
        poll_interval_s=6,
        yield_grace_s=5,  # all a rank has on PBS: the qdel after it ends the job at once
        safety_margin_s=10,
        max_harvested_nodes=2,
        max_nodes_per_block=1,
        address="127.0.0.1",
        worker_init=f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
    )
    provider = BackfillProvider(profile, env=pbs.env, slots=2)
    htex = harvest_executor(provider)
    config = Config(executors=[htex], run_dir=str(tmp_path / "runinfo"), strategy_period=1)
    try:
        with parsl.load(config):
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
            # A step every 1.5 s or so: a rank told to leave reaches its next commit up to a
            # step later, so the notice that follows the drain by milliseconds must let it
            # live that long (USR1 did not).
            job = app.submit(pace_file=str(pace), step_delay_s=1.5, epochs=30, batch_size=32)
            sc.wait_size(job, 2, progress=2, timeout_s=240)

            target = job.coordinator.current_members()[1]
            (block,) = [b for b in provider.blocks() if b.block_id == str(target.block_id)]
            assert block.phase is Phase.RUNNING and len(block.nodes) == 1
            pbs.set_node(block.nodes[0], state="offline")  # drained by an administrator

            def ended() -> bool:
                return any(
                    r.job_id == block.job_id and r.end_state is not None for r in provider.history()
                )

            assert wait_for(ended, 90), provider.history()
            events = job.coordinator.events()
            kinds = [(e["event"], e.get("member")) for e in events]
            # A planned leave at a commit: the rank was never lost, the group never rolled
            # back, and it trained on without the rank.
            assert ("left", target.member_id) in kinds, kinds
            assert ("lost", target.member_id) not in kinds, kinds
            assert not any(e["event"] == "rollback" for e in events), kinds

            def trains_without(c) -> bool:
                return any(
                    e["start_step"] is not None and target.member_id not in e["members"]
                    for e in c.epochs()
                )

            assert job.coordinator.wait_for(trains_without, 90), job.coordinator.epochs()
            pace.unlink()
            assert job.future is not None
            result = job.future.result(timeout=240)
            assert result["steps"] > 0
    finally:
        pbs.kill_everything()

    (record,) = [r for r in provider.history() if r.job_id == block.job_id]
    # Its node taken out of service, not a native job: it left, and says why.
    assert record.cancel_reason is CancelReason.OUT_OF_SERVICE and record.end_state is P.TIMEOUT
    assert record.message.startswith(f"job {block.job_id}: left: its node is out of service (")
    assert record.message.endswith("(CANCELLED)"), record.message
    calls = pbs.calls()
    assert f"qsig -s URG {block.job_id}" in calls
    assert calls.index(f"qsig -s URG {block.job_id}") < calls.index(f"qdel {block.job_id}")
    # The block script's trap ran; the job lived on until the qdel, whose TERM ended its
    # login shell (256 + 15; the notice as USR1 ended it with 266, before any qdel).
    # (Parsl puts the provider's scripts into its run directory.)
    assert (Path(provider.script_dir) / f"usr1-{block.job_id}").exists()
    job_attrs = pbs.job(block.job_id)
    assert (job_attrs["substate"], job_attrs["Exit_status"]) == (91, 271)
