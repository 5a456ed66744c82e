"""The provider on a live OpenPBS 23.06 server (``scripts/pbs-server start``).

Blocks go to the ``backfill`` queue as root (the server's ``acl_roots`` allows it), natives to
``workq`` as the user ``pbsnative``. What ``test_pbs_provider.py`` shows on the stand-in server,
here on the real one: blocks run on idle vnodes and are tracked by vnode, never on a vnode
bound to another queue; five blocks that end between two polls each get their own end state
(``qstat -f -x -F json ID1 ID2`` prints only the first job); and ``close()`` leaves no job.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.provider import BackfillProvider
from tests.pbs_server import PBSServer, wait_until

pytestmark = pytest.mark.pbs


def live_provider(pbs: PBSServer, tmp_path: Path, slots: int) -> BackfillProvider:
    profile = load_profile("example-pbs").with_overrides(
        queue="backfill",
        min_block_s=60,
        poll_interval_s=2,
        yield_grace_s=1.5,
        safety_margin_s=10,
        max_nodes=slots,
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
