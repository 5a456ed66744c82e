"""A whole worker pool frozen on its host: the product's own path, on the cluster of real hosts.

A BackfillProvider on ``providers/slurm-hosts.yaml`` (Slurm nodes n1..n3 of
``scripts/host-cluster``, each its own address and host name; the interchange and the
controller listen on the bridge, found through the profile's ``interface``) runs one malleable
job on three one-node blocks. The block of rank 1 is frozen whole (SIGSTOP to its process group:
the batch shell, Parsl's manager, its worker and the rank: a node that hangs). The survivors must
train again within the heartbeat timeout plus a regroup; after SIGCONT the pool, which Parsl
has dropped, must go, and the job must finish with every sample trained once per epoch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import parsl
import pytest
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.jobs.states import JobState as P

from parsl_malleable.app import malleable_app
from parsl_malleable.controller import configure
from parsl_malleable.controller.phases import BlockPhase
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider, harvest_executor
from parsl_malleable.watchdog import group_members
from tests.elastic import elastic_scenario as sc
from tests.host_cluster import HostCluster
from tests.provider.conftest import wait_for
from tests.stacks import stacks_of

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_TIMEOUT_S = 10.0  # the runtime's default
REGROUP_LIMIT_S = HEARTBEAT_TIMEOUT_S + 15.0
SLOW_LEAVE_S = 15.0  # a woken pool ends in 0.5-1.5 s; past this its stacks are taken


def host_provider(
    hosts: HostCluster, tmp_path: Path
) -> tuple[BackfillProvider, HighThroughputExecutor]:
    """A BackfillProvider on the host cluster's profile, short polls, and its executor."""
    sc.environment_ready()
    provider = BackfillProvider(
        "slurm-hosts",
        env=dict(hosts.env),
        script_dir=str(tmp_path / "blocks"),
        poll_interval_s=2,
        yield_grace_s=1,
        worker_init=f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
    )
    return provider, harvest_executor(provider)


@pytest.mark.slow
@pytest.mark.parametrize("woken", [True, False], ids=["woken", "never-resumed"])
def test_a_frozen_worker_pool_is_dropped_and_its_processes_end(
    hosts: HostCluster, tmp_path: Path, woken: bool
) -> None:
    """Woken: the pool goes at once. Never resumed: the run's end takes it (the block is
    cancelled: Slurm sends SIGCONT, SIGTERM, then SIGKILL), within 60 s."""
    provider, htex = host_provider(hosts, tmp_path)
    assert htex.address == hosts.driver_address  # found through the interface, as at a site
    config = Config(executors=[htex], run_dir=str(tmp_path / "runinfo"), strategy_period=1)
    pace = tmp_path / "pace"
    pace.touch()
    try:
        with parsl.load(config):
            controller = configure(htex)
            app = malleable_app(
                checkpoint_dir=str(tmp_path / "ckpt"), max_nodes=3, min_nodes=1, settle_s=1.0
            )(sc.train_paced)
            job = app.submit(
                pace_file=str(pace), step_delay_s=0.1, epochs=4, hidden=(64,), name="pool"
            )
            sc.wait_size(job, 3, progress=5, timeout_s=300)
            members = job.coordinator.current_members()
            assert {m.host for m in members} == set(hosts.hosts), members
            frozen = members[1]
            pgid = os.getpgid(frozen.pid)
            before = job.coordinator.epochs()[-1]["epoch"]
            stopped_at = time.time()
            os.killpg(pgid, signal.SIGSTOP)
            try:
                sc.wait_size(job, 2, progress=1, timeout_s=120)
            except BaseException:
                os.killpg(pgid, signal.SIGCONT)
                raise
            regrouped = [
                e for e in job.coordinator.epochs() if e["epoch"] > before and e["resumed_at"]
            ]
            waited = regrouped[0]["resumed_at"] - stopped_at
            print(f"frozen pool: next step at world 2 after {waited:.1f} s")
            assert waited <= REGROUP_LIMIT_S, (waited, regrouped)
            old = next(e for e in job.coordinator.epochs() if e["epoch"] == before)
            assert regrouped[0]["start_step"] >= old["last_step"]
            if woken:
                # Dropped by Parsl and by the coordinator, the woken pool ends (its manager
                # finds the interchange silent past heartbeat_threshold and exits, taking its
                # worker and rank with it). Woken only once Parsl has dropped it: its threshold
                # (10 s) is the coordinator's heartbeat timeout, so the regroup can come first;
                # woken then, the pool was still Parsl's, healthy and idle, and lived to the
                # run's end (seen twice, once in CI: 60-106 s).
                def dropped_by_parsl() -> bool:
                    return frozen.block_id not in {
                        str(m["block_id"]) for m in htex.connected_managers()
                    }

                assert wait_for(dropped_by_parsl, 60), htex.connected_managers()
                os.killpg(pgid, signal.SIGCONT)
                woke_at = time.monotonic()
                # When slow, the stacks of what is left are reported (a warning in the run's
                # summary): the evidence for the next look.
                gone = wait_for(lambda: not group_members(pgid), SLOW_LEAVE_S)
                if not gone:
                    stacks = "\n".join(f"pid {p}:\n{stacks_of(p)}" for p in group_members(pgid))
                    gone = wait_for(lambda: not group_members(pgid), 60 + 30)
                    warnings.warn(
                        f"woken pool slow to end: gone={gone} {time.monotonic() - woke_at:.1f} s "
                        f"after SIGCONT; its stacks {SLOW_LEAVE_S:.0f} s after:\n"
                        f"{stacks[-12000:]}",
                        stacklevel=1,
                    )
                print(f"frozen pool: gone {time.monotonic() - woke_at:.1f} s after SIGCONT")
            pace.unlink()
            result = job.future.result(timeout=300)
    finally:
        provider.close()
    if not woken:
        ended_at = time.monotonic()
        gone = wait_for(lambda: not group_members(pgid), 60)
        print(f"frozen pool: gone {time.monotonic() - ended_at:.1f} s after the run's end")
    assert result["test_accuracy"] >= 0.9, result
    assert gone, group_members(pgid)
    assert any(e["event"] == "lost" and e["member"] == frozen.member_id
               for e in job.coordinator.events())  # fmt: skip
    # The phase log says where and why that rank's training ended.
    ends = [e for e in controller.phases.events() if e.phase is BlockPhase.LAST_STEP]
    said = [(e.block, e.node, e.why) for e in ends]
    assert any(e.node == frozen.host and e.why.startswith("lost: no heartbeat") for e in ends), (
        frozen.host,
        said,
    )


@pytest.mark.slow
def test_a_host_that_vanishes_while_its_block_starts_costs_only_that_block(
    hosts: HostCluster, tmp_path: Path
) -> None:
    """n3 is cut off the moment its block runs (its worker pool still importing): the job
    trains on the two other hosts, the provider keeps track of the lost block and ends it, and
    nothing is left on the cluster once the host is back and the run is over."""
    provider, htex = host_provider(hosts, tmp_path)
    config = Config(executors=[htex], run_dir=str(tmp_path / "runinfo"), strategy_period=1)
    pace = tmp_path / "pace"
    pace.touch()
    lost: list[str] = []
    try:
        with parsl.load(config):
            configure(htex)
            app = malleable_app(
                checkpoint_dir=str(tmp_path / "ckpt"), max_nodes=3, min_nodes=1, settle_s=1.0
            )(sc.train_paced)
            job = app.submit(
                pace_file=str(pace), step_delay_s=0.1, epochs=4, hidden=(64,), name="vanish"
            )

            def running_on_n3() -> bool:
                found = [b for b in provider.blocks() if b.nodes == ("n3",) and b.start]
                lost.extend(b.job_id for b in found)
                return bool(found)

            assert wait_for(running_on_n3, 300, step_s=0.1), provider.blocks()
            hosts.cut("n3")
            cut_at = time.monotonic()
            try:
                sc.wait_size(job, 2, progress=5, timeout_s=180)
                print(f"vanished host: training at world 2 {time.monotonic() - cut_at:.1f} s "
                      "after the cut")  # fmt: skip
                assert all(m.host != "n3" for m in job.coordinator.current_members())

                def block_ended() -> bool:
                    record = {r.job_id: r for r in provider.history()}[lost[0]]
                    return record.end_state is not None

                # Slurm finds the node gone (SlurmdTimeout, 30 s on the host cluster) and fails
                # its job; the provider, which never lost track of it, records that end.
                assert wait_for(block_ended, 240), provider.history()
                print(f"vanished host: its block ended {time.monotonic() - cut_at:.1f} s "
                      "after the cut")  # fmt: skip
            finally:
                hosts.heal("n3")
            pace.unlink()
            result = job.future.result(timeout=300)
    finally:
        provider.close()
    assert result["test_accuracy"] >= 0.9, result
    record = {r.job_id: r for r in provider.history()}[lost[0]]
    print(f"vanished host: the block's end as recorded: {record.end_state} {record.message!r}")
    # The provider left the node Slurm marked down (it never lost the block), and says so.
    assert record.cancel_reason is CancelReason.OUT_OF_SERVICE, record
    assert record.end_state is P.TIMEOUT and "n3 down" in record.message, record
    # Back on the network, the host hears its job was ended, and nothing of it runs on.
    ended_at = time.monotonic()
    assert wait_for(lambda: not hosts.job_processes_on("n3"), 120), hosts.job_processes_on("n3")
    print(f"vanished host: its block's processes gone {time.monotonic() - ended_at:.1f} s "
          "after the run's end")  # fmt: skip

    def left() -> str:
        return subprocess.run(
            ["squeue", "-h", "-o", "%i %j %T"], env=hosts.env, capture_output=True, text=True,
            timeout=30,
        ).stdout.strip()  # fmt: skip

    assert wait_for(lambda: not left(), 120), left()
