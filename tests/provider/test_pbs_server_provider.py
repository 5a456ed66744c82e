"""The provider on a live OpenPBS 23.06 server (``scripts/pbs-server start``).

Blocks go to the ``backfill`` queue as root (the server's ``acl_roots`` allows it), natives to
``workq`` as the user ``pbsnative``. What ``test_pbs_provider.py`` shows on the stand-in server,
here on the real one: blocks run on idle vnodes and are tracked by vnode, never on a vnode
bound to another queue; five blocks that end between two polls each get their own end state
(``qstat -f -x -F json ID1 ID2`` prints only the first job); and ``close()`` leaves no job.
"""

from __future__ import annotations

import sys
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
from tests.pbs_server import PBSServer, wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.pbs


def live_provider(pbs: PBSServer, tmp_path: Path, slots: int) -> BackfillProvider:
    profile = load_profile("example-pbs").with_overrides(
        queue="backfill",
        min_block_s=60,
        poll_interval_s=2,
        yield_grace_s=1.5,
        safety_margin_s=10,
        max_harvested_nodes=slots,
        max_nodes_per_block=1,
        max_blocks=slots,
    )
    return BackfillProvider(profile, env=pbs.env, slots=slots, script_dir=str(tmp_path / "blocks"))


def ours_unfinished(pbs: PBSServer) -> dict[str, str]:
    """Unfinished jobs that are not natives."""
    jobs = pbs.jobs()
    return {
        i: a["job_state"]
        for i, a in jobs.items()
        if a["job_state"] not in ("F", "X") and not a["Job_Owner"].startswith("pbsnative@")
    }


def all_running(provider: BackfillProvider, count: int) -> bool:
    blocks = provider.blocks()
    return len(blocks) == count and all(b.phase is Phase.RUNNING for b in blocks)


def test_blocks_run_on_idle_vnodes_and_close_leaves_no_job(pbs: PBSServer, tmp_path: Path) -> None:
    bound = pbs.compute_vnodes()[-1]
    pbs.run("qmgr", "-c", f"set node {bound} queue = workq")  # only natives may run there
    provider = live_provider(pbs, tmp_path, slots=3)
    try:
        for i in range(3):
            provider.submit("exec sleep 600", 1, f"parsl.htex.block-{i}")
        assert wait_until(lambda: all_running(provider, 3), 90), provider.history()
        blocks = provider.blocks()
        held = [n for b in blocks for n in b.nodes]
        assert len(held) == len(set(held)) == 3, held  # one vnode each, by vnode name
        assert set(held) <= set(pbs.compute_vnodes()) - {bound}, held
        jobs = pbs.jobs()
        assert {jobs[b.job_id]["queue"] for b in blocks} == {"backfill"}
    finally:
        provider.close()
        pbs.run("qmgr", "-c", f"unset node {bound} queue")
    assert wait_until(lambda: not ours_unfinished(pbs), 60), ours_unfinished(pbs)


def test_five_blocks_that_end_in_one_poll_each_get_their_end_state(
    pbs: PBSServer, tmp_path: Path
) -> None:
    provider = live_provider(pbs, tmp_path, slots=5)
    try:
        for i in range(5):
            provider.submit("exec sleep 600", 1, f"parsl.htex.block-{i}")
        assert wait_until(lambda: all_running(provider, 5), 90), provider.history()
        ids = [b.job_id for b in provider.blocks()]
        pbs.run("qdel", *ids)  # an operator deletes all five at once

        def all_ended() -> bool:
            ended = [r for r in provider.history() if r.job_id in ids and r.end_state is not None]
            return len(ended) == 5

        assert wait_until(all_ended, 60), provider.history()
    finally:
        provider.close()
    # (The provider then starts new blocks for the slots: they are not the five.)
    records = [r for r in provider.history() if r.job_id in ids]
    assert {r.end_state for r in records} == {P.CANCELLED}, records
    messages = [r.message for r in records]
    assert all(m.endswith("(CANCELLED)") for m in messages), messages  # none UNKNOWN
    assert wait_until(lambda: not ours_unfinished(pbs), 60), ours_unfinished(pbs)


@pytest.mark.slow
def test_a_native_makes_a_block_yield_its_rank_leaves_at_a_commit_and_the_native_runs(
    pbs: PBSServer, tmp_path: Path
) -> None:
    # Two blocks carry the two torch ranks of one malleable job; a native that needs every
    # vnode but one arrives in workq. A block yields: its rank leaves at a commit (never
    # lost, no rollback), the job trains on with the other, the block ends CANCELLED after
    # qsig -s URG and the qdel, and the native starts.
    sc.environment_ready()
    bindir = Path(sys.executable).parent
    profile = load_profile("example-pbs").with_overrides(
        queue="backfill",
        min_block_s=60,
        poll_interval_s=4,
        yield_grace_s=3,
        safety_margin_s=10,
        max_harvested_nodes=2,
        max_nodes_per_block=1,
        address="127.0.0.1",
        # A PBS job gets a login environment: the worker needs this interpreter and the repo.
        worker_init=f"export PATH={bindir}:$PATH PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
    )
    provider = BackfillProvider(profile, env=pbs.env, slots=2)
    htex = harvest_executor(provider)
    config = Config(executors=[htex], run_dir=str(tmp_path / "runinfo"), strategy_period=1)
    native = ""
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
        job = app.submit(pace_file=str(pace), step_delay_s=1.0, epochs=30, batch_size=32)
        sc.wait_size(job, 2, progress=2, timeout_s=300)
        width = len(pbs.compute_vnodes()) - 1
        native = pbs.qsub_native(
            "-l", f"select={width}:ncpus=1", "-l", "place=scatter", "-l", "walltime=00:01:00",
            "--", "/bin/sleep", "5",
        )  # fmt: skip

        def yielded() -> bool:
            return any(
                r.cancel_reason is CancelReason.YIELD and r.end_state is not None
                for r in provider.history()
            )

        assert wait_until(yielded, 120), provider.history()
        (record,) = [r for r in provider.history() if r.cancel_reason is CancelReason.YIELD]
        events = job.coordinator.events()
        kinds = [e["event"] for e in events]
        assert "left" in kinds and "lost" not in kinds and "rollback" not in kinds, kinds
        assert wait_until(lambda: pbs.jobs(history=True)[native]["job_state"] in "RF", 120)
        pace.unlink()
        result = job.future.result(timeout=300)
        assert result["steps"] > 0
    assert record.end_state is P.TIMEOUT  # how Parsl is told: the block's time is up
    assert (Path(provider.script_dir) / f"usr1-{record.job_id}").exists()  # the trap ran
    attrs = pbs.jobs(history=True)[record.job_id]
    # The notice (URG) never ended the job (USR1 did: 266). Blocks run as root on this server
    # and its MoM ignores root's processes, so the notice can end the job in PBS's books at
    # once (0, docs/schedulers.md); else the qdel after the grace ends the login shell (271).
    ends = {0: "COMPLETED", 271: "CANCELLED"}
    assert attrs["Exit_status"] in ends, attrs
    said = ends[attrs["Exit_status"]]
    assert record.message == f"job {record.job_id}: yielded to a native job ({said})"
    if said == "CANCELLED":  # the qdel ended it: PBS's obittime measured the teardown
        assert provider.teardown.measured >= 1 and provider.teardown.seconds < 30
    assert wait_until(lambda: not ours_unfinished(pbs), 60), ours_unfinished(pbs)
