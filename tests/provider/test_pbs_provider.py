"""The provider on PBS Pro, through stand-in PBS commands.

OpenPBS is not packaged for Debian, so qstat/pbsnodes/qsub here are scripts first on PATH:
some print the documents of tests/data/pbs/ and log their arguments, and ``fake_pbs.FakePBS``
is a small server whose MoM runs the block scripts as pbs_mom does (a login shell in its own
session, qsig to every process of it, qdel's TERM then KILL, the rest of the session killed
when the shell ends).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.records import JobState

from .conftest import wait_for
from .fake_pbs import FakePBS

PBS_DATA = Path(__file__).resolve().parents[1] / "data" / "pbs"
SNAPSHOT_TIME = 1795994000.0  # while jobs 101, 106 and 107 of qstat.json run


def test_blocks_go_to_the_pbs_queue_with_a_self_signal(
    fake_bin: Callable[[str, str], dict[str, str]], tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    env: dict[str, str] = {}
    path = shlex.quote(str(PBS_DATA / "pbsnodes.json"))
    env = fake_bin("pbsnodes", f'echo "pbsnodes $*" >> {log}; cat {path}')
    env = fake_bin("qstat", _qstat(log, PBS_DATA / "qstat.json"))
    env = fake_bin("qsub", f'echo "qsub $*" >> {log}; echo 777.pbs-head')
    env = fake_bin("qselect", "echo 777.pbs-head")  # the provider checks the id by name
    profile = load_profile("example-pbs").with_overrides(reservations=False, min_block_s=300)
    scheduler = PBSScheduler(
        queue=profile.queue,
        account=profile.account,
        reservations=False,
        env=env,
        clock=lambda: SNAPSHOT_TIME,
    )
    provider = BackfillProvider(
        profile,
        scheduler=scheduler,
        autostart=False,
        script_dir=str(tmp_path / "blocks"),
        clock=lambda: SNAPSHOT_TIME,
    )
    slot = provider.submit("echo worker", 1, "parsl.htex.block-0")
    report = provider.poll_once()
    assert report.error == "" and report.submitted == ["777.pbs-head"]
    calls = log.read_text().splitlines()
    assert calls[2:4] == ["pbsnodes -a -F json", "qstat -f -t -F json"]
    qsub = next(c for c in calls if c.startswith("qsub "))
    # Job 108 (1 node) takes node01 now; node02 is a hole until job 103 (4 nodes) can start,
    # when job 106 reaches its limit 1000 s from now: 1000 - 180 s margin, whole minutes.
    record = provider.history()[0]
    assert record.planned_nodes == ("node02",) and record.phase is Phase.PENDING
    assert record.walltime_s == 780
    assert f"select={record.nodes_requested}" in qsub and "place=scatter:excl" in qsub
    # Each job's name is unique: the provider's tag, the Parsl block, the submit's number.
    assert provider.tag.startswith("pm-block-backfill-") and record.name == f"{provider.tag}-0-0"
    assert "-q backfill" in qsub and f"-N {record.name}" in qsub
    script = Path(qsub.split()[-1]).read_text()
    assert f"sleep {int(record.walltime_s - profile.signal_margin_s)}" in script
    assert "kill -USR1 $$" in script and "srun" not in script
    assert provider.status([slot])[0].state is P.PENDING


def _qstat(log: Path, jobs: Path, queues: Path = PBS_DATA / "qstat_Q.json") -> str:
    """A stand-in qstat: the queues for -Q, the server for -B, else the jobs document."""
    return (
        f'echo "qstat $*" >> {log}\n'
        f'case " $* " in *" -Q "*) cat {shlex.quote(str(queues))}; exit;; esac\n'
        f'case " $* " in *" -B "*) cat {shlex.quote(str(PBS_DATA / "qstat_B.json"))}; exit;; esac\n'
        f"cat {shlex.quote(str(jobs))}"
    )


def test_no_block_goes_to_a_vnode_bound_to_another_queue(
    fake_bin: Callable[[str, str], dict[str, str]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The live case: the only free vnode is bound to otherq (queue=otherq) and blocks go to
    # workq; PBS keeps such a block queued ("Can Never Run"), it is withdrawn after
    # start_timeout_s, and the next poll submitted the same again, forever.
    log = tmp_path / "calls.log"
    nodes = json.loads((PBS_DATA / "live" / "pbsnodes-array-running.json").read_text())
    host = nodes["nodes"]["pbshost"]
    host.update(state="free", queue="otherq")
    del host["jobs"]
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    queues = {
        "Queue": {
            "workq": {"queue_type": "Execution", "enabled": "True", "started": "True"},
            "otherq": {"queue_type": "Execution", "hasnodes": "True", "enabled": "True",
                       "started": "True"},
        }
    }  # fmt: skip
    (tmp_path / "queues.json").write_text(json.dumps(queues))
    (tmp_path / "jobs.json").write_text('{"Jobs": {}}')
    fake_bin("pbsnodes", f'echo "pbsnodes $*" >> {log}; cat {tmp_path / "nodes.json"}')
    fake_bin("qsub", f'echo "qsub $*" >> {log}; echo 28.pbshost')
    fake_bin("qselect", "echo 28.pbshost")
    env = fake_bin("qstat", _qstat(log, tmp_path / "jobs.json", tmp_path / "queues.json"))
    profile = load_profile("example-pbs").with_overrides(
        queue="workq", reservations=False, min_block_s=300, start_timeout_s=1
    )
    provider = BackfillProvider(
        profile, env=env, autostart=False, script_dir=str(tmp_path / "blocks")
    )
    provider.submit("echo worker", 1, "parsl.htex.block-0")
    with caplog.at_level(logging.INFO, logger="parsl_malleable.provider"):
        reports = [provider.poll_once() for _ in range(3)]
    assert [r.error for r in reports] == ["", "", ""]
    assert not any(c.startswith("qsub") for c in log.read_text().splitlines())
    assert provider.history() == []
    said = [r.getMessage() for r in caplog.records if "blocks to workq" in r.getMessage()]
    assert said == ["blocks to workq: 1 idle node(s), none of which workq may use (bound to "
                    "another queue or partition, or outside its restrictions)"]  # fmt: skip
    # Blocks to otherq itself would go there.
    other = BackfillProvider(
        profile.with_overrides(queue="otherq"),
        env=env,
        autostart=False,
        script_dir=str(tmp_path / "blocks"),
    )
    other.submit("echo worker", 1, "parsl.htex.block-0")
    assert other.poll_once().submitted == ["28.pbshost"]
    assert other.history()[0].planned_nodes == ("pbshost",)


def test_a_pbs_yield_warns_the_block_script_and_its_qdel_ends_it_cancelled(
    tmp_path: Path,
) -> None:
    # qsig signals every process of the job. The notice must reach the block script's trap
    # and leave the login shell and the workers running until the qdel yield_grace_s later;
    # the qdel'ed job then ends CANCELLED (substate 91), not FAILED.
    pbs = FakePBS(tmp_path / "pbs", {"n1": {"state": "free"}})
    saw = tmp_path / "worker-saw-the-notice"
    # A worker that handles no signal (as Parsl's pool does not): it notes that it outlived
    # the notice, which USR1 would have ended it with.
    worker = (
        f'until [ -e "$PM_BLOCK_SIGNAL_FILE" ]; do sleep 0.1; done; touch {shlex.quote(str(saw))}; '
        "exec sleep 600"
    )
    profile = load_profile("example-pbs").with_overrides(
        queue="workq",
        reservations=False,
        min_block_s=60,
        poll_interval_s=2,
        yield_grace_s=1.5,
        safety_margin_s=10,
        max_nodes_per_block=1,
    )
    provider = BackfillProvider(profile, env=pbs.env, slots=1, script_dir=str(tmp_path / "blocks"))
    try:
        provider.submit(worker, 1, "parsl.htex.block-0")
        assert wait_for(
            lambda: provider.blocks() and provider.blocks()[0].phase is Phase.RUNNING, 60
        )
        (block,) = provider.blocks()
        pbs.set_node("n1", state="offline")  # an administrator drains the node: it yields

        def ended() -> bool:
            return any(r.end_state is not None for r in provider.history())

        assert wait_for(ended, 60), provider.history()
    finally:
        provider.close()
        pbs.kill_everything()
    (record,) = provider.history()
    # Its node taken out of service, not a native job: it left, and says why.
    assert record.cancel_reason is CancelReason.OUT_OF_SERVICE and record.end_state is P.TIMEOUT
    assert record.message.startswith(f"job {record.job_id}: left: its node is out of service (")
    assert record.message.endswith("(CANCELLED)"), record.message
    calls = pbs.calls()
    signals = [c for c in calls if c.startswith("qsig")]
    assert signals == [f"qsig -s URG {block.job_id}"]
    assert calls.index(signals[0]) < calls.index(f"qdel {block.job_id}")
    # The trap ran, the worker outlived the notice, and the job lived until the qdel: the
    # TERM of the qdel ended its login shell (256 + 15), not the notice (266, USR1).
    assert (tmp_path / "blocks" / f"usr1-{block.job_id}").exists()
    assert saw.exists()
    job = pbs.job(block.job_id)
    assert (job["job_state"], job["substate"], job["Exit_status"]) == ("F", 91, 271)
    scheduler = provider.scheduler
    assert scheduler.status([block.job_id])[block.job_id].state is JobState.CANCELLED
    # The qdel's end, in whole seconds, taught the provider its teardown (and no other end).
    assert provider.teardown.measured == 1
    assert 0 < provider.teardown.seconds <= 1 + 5


# What a qsub may print after it queued the job: a cut-off id ("1" for "101.fakepbs"),
# another job's id, garbage, nothing. Only "cut" is computed from the real reply.
QSUB_REPLIES = {"cut": "id-cut", "another's": "native", "garbage": "Job queued", "nothing": ""}


@pytest.mark.parametrize("reply", list(QSUB_REPLIES))
def test_whatever_qsub_prints_the_server_holds_exactly_the_tracked_blocks(
    tmp_path: Path, reply: str
) -> None:
    pbs = FakePBS(tmp_path / "pbs", {f"n{i}": {"state": "free"} for i in range(1, 4)})
    bin_dir = tmp_path / "pbs" / "bin"
    (bin_dir / "qsub").rename(bin_dir / "qsub-real")
    native_script = tmp_path / "native.sh"
    native_script.write_text("#!/bin/sh\nexec sleep 600\n")
    native_script.chmod(0o755)
    native = subprocess.run(
        [bin_dir / "qsub-real", "-N", "native", "-o", os.devnull, native_script],
        env={**os.environ, **pbs.env}, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    said = {"id-cut": '"${id%??????????}"', "native": native}.get(
        QSUB_REPLIES[reply], shlex.quote(QSUB_REPLIES[reply])
    )
    # The real (stand-in) qsub queues the job; this one then prints the reply under test.
    (bin_dir / "qsub").write_text(
        f'#!/bin/sh\nid=$({bin_dir / "qsub-real"} "$@") || exit 1\necho {said}\n'
    )
    (bin_dir / "qsub").chmod(0o755)
    profile = load_profile("example-pbs").with_overrides(
        queue="workq", reservations=False, min_block_s=60, max_nodes_per_block=1
    )
    provider = BackfillProvider(
        profile, env=pbs.env, slots=2, autostart=False, script_dir=str(tmp_path / "blocks")
    )

    def ours() -> set[str]:
        """Our blocks the server holds, as its qselect lists them (not yet finished)."""
        jobs = pbs.jobs()
        return {i for i, j in jobs.items() if j["job_state"] not in ("F", "X") and i != native}

    try:
        for i in range(2):
            provider.submit("exec sleep 600", 1, f"parsl.htex.block-{i}")
        report = provider.poll_once()
        assert report.error == "" and len(report.submitted) == 2, report
        tracked = {b.job_id for b in provider.blocks()}
        assert tracked == set(report.submitted) == ours() and native not in tracked
        faults = provider.stats()["faults"]
        id_like = reply in ("cut", "another's")
        assert faults == ({"id_repaired": 2} if id_like else {"submit_adopted": 2}), faults
        provider.close()
        assert wait_for(lambda: not ours(), 30), pbs.jobs()
        assert f"qdel {native}" not in pbs.calls()
        assert pbs.job(native)["job_state"] == "R"  # another's job: never touched
    finally:
        provider.close()
        pbs.kill_everything()
