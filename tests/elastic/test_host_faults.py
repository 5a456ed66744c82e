"""Faults as real nodes have them, on the cluster of namespaced hosts (``scripts/host-cluster``):
three ranks, one per host (n1..n3, each its own address and host name), around a coordinator in
the test process listening on the driver's address of the hosts' network. The ranks reach the
coordinator and each other across the bridge, as at a site.

- a rank frozen on its host (SIGSTOP) and run again;
- a host cut off from everything (its link down) and healed;
- a slow link (tbf each way) that must not evict a healthy rank.

In each: no committed step lost and every sample trained exactly once per epoch (the rank
script counts them, ``ddp_rank.py``); a rank that comes back is told to leave, never waits.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from tests.elastic import elastic_scenario as sc
from tests.elastic.rank_procs import Ranks
from tests.host_cluster import HostCluster

# Long enough, paced, for a late rank to find training going: twice in CI the third rank's
# process joined only 18 s and 58 s after the first two had formed a group (right after the
# vanished-host test had cut and healed n3); six epochs had ended by then.
EPOCHS = 20
HEARTBEAT_TIMEOUT_S = 3.0
COLLECTIVE_TIMEOUT_S = 60.0  # far above the target: only an abort regroups in time
SLOW_LEAVE_S = 15.0  # a woken rank leaves in about a second; past this its stacks are taken
REGROUP_LIMIT_S = HEARTBEAT_TIMEOUT_S + 15.0  # the target (about +1-2 s) and room for load
ARGS = {"epochs": EPOCHS, "batch_size": 32, "lr": 0.02, "seed": 0}


class HostJob:
    """One job: a coordinator on the driver's address and a rank on each host."""

    def __init__(self, hosts: HostCluster, tmp_path: Path, heartbeat_timeout_s: float) -> None:
        self.coordinator = Coordinator(
            TorchRendezvousHost(hosts.driver_address), min_nodes=1, max_nodes=3, settle_s=0.3,
            host=hosts.driver_address, heartbeat_timeout_s=heartbeat_timeout_s,
        )  # fmt: skip
        self.coordinator.start()
        self.pace = tmp_path / "pace"
        self.pace.touch()
        settings = {
            "collective_timeout_s": COLLECTIVE_TIMEOUT_S,
            "heartbeat_interval_s": 0.5,
            "torch_threads": 1,
        }
        names = sorted(hosts.hosts)
        self.ranks = Ranks(
            self.coordinator,
            # Paced: a rank that starts late on a loaded machine still finds training going
            # (at 0.05 s a step the other two finished all epochs in 18 s before the third
            # joined once, in CI).
            {**ARGS, "pace_file": str(self.pace), "step_delay_s": 0.2},
            settings,
            where=lambda i, argv: hosts.on(names[i], argv),
        )
        self.view = SimpleNamespace(coordinator=self.coordinator)

    def start(self) -> None:
        self.ranks.start(3)
        sc.wait_size(self.view, 3, progress=10, timeout_s=180)

    def finish(self, survivors: list[str]) -> dict[str, Any]:
        """Training at full speed to its end; the value of the survivor that has one."""
        self.pace.unlink()
        outcomes = [self.ranks.outcome(name) for name in survivors]
        assert {o["status"] for o in outcomes} == {"finished"}, outcomes
        value: dict[str, Any] = next(o["value"] for o in outcomes if o["value"] is not None)
        assert value["seen_min"] == [1.0] * EPOCHS, value["seen_min"]
        assert value["seen_max"] == [1.0] * EPOCHS, value["seen_max"]
        return value

    def close(self) -> None:
        self.ranks.close()
        self.coordinator.close()


@pytest.fixture
def job(hosts: HostCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HostJob]:
    made = HostJob(hosts, tmp_path, getattr(request, "param", HEARTBEAT_TIMEOUT_S))
    try:
        yield made
    finally:
        made.close()


def regroup_after(job: HostJob, since: float, before_epoch: int) -> dict[str, Any]:
    """The first group of 2 after ``before_epoch``, once it has trained a step."""
    sc.wait_size(job.view, 2, progress=1, timeout_s=COLLECTIVE_TIMEOUT_S + 30)
    regrouped = [
        e for e in job.coordinator.epochs() if e["epoch"] > before_epoch and e["resumed_at"]
    ]
    waited = regrouped[0]["resumed_at"] - since
    print(f"next step at world 2 after {waited:.1f} s")
    assert waited <= REGROUP_LIMIT_S, (waited, regrouped)
    old = next(e for e in job.coordinator.epochs() if e["epoch"] == before_epoch)
    assert regrouped[0]["start_step"] >= old["last_step"], (old, regrouped[0])  # none lost
    return regrouped[0]


def assert_sent_away(
    job: HostJob, member_id: str, before_epoch: int, outcome: dict[str, Any]
) -> None:
    """It left when told to, was in no group after its loss, and the owner was told."""
    assert outcome["status"] == "left", outcome
    events = job.coordinator.events()
    assert any(e["event"] == "lost" and e["member"] == member_id for e in events)
    assert any(e["event"] == "sent_away" and e["member"] == member_id for e in events)
    assert any(member_id in w and "came back" in w for w in job.coordinator.warnings())
    later = [e for e in job.coordinator.epochs() if e["epoch"] > before_epoch]
    assert all(member_id not in e["members"] for e in later), later


@pytest.mark.slow
def test_a_rank_frozen_on_its_host_is_dropped_fast_and_sent_away(job: HostJob) -> None:
    job.start()
    members = job.coordinator.current_members()
    frozen = members[1]
    assert len({m.host for m in members}) == 3, members  # one rank per host, named after it
    before = job.coordinator.epochs()[-1]["epoch"]
    stopped_at = time.time()
    os.kill(frozen.pid, signal.SIGSTOP)  # the hosts share this machine's process ids
    try:
        regroup_after(job, stopped_at, before)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
        woken_at = time.time()
    # Woken, it leaves at once when the notice's abort meets its collective; once in CI it left
    # only at its collective timeout (unexplained, docs/elastic.md): bounded by that, and when
    # it is slow its stacks are reported (a warning in the run's summary) to find out why.
    outcome, stacks = job.ranks.outcome_or_stacks(
        frozen.member_id, frozen.pid, SLOW_LEAVE_S, timeout_s=COLLECTIVE_TIMEOUT_S + 30
    )
    if stacks:
        warnings.warn(
            f"woken rank slow to leave: exited {time.time() - woken_at:.1f} s after SIGCONT; "
            f"its stacks {SLOW_LEAVE_S:.0f} s after:\n{stacks[-20000:]}",
            stacklevel=1,
        )
    assert_sent_away(job, frozen.member_id, before, outcome)
    job.finish([m.member_id for m in members if m is not frozen])


@pytest.mark.slow
def test_a_host_cut_off_and_healed_is_dropped_fast_and_sent_away(
    job: HostJob, hosts: HostCluster
) -> None:
    job.start()
    members = job.coordinator.current_members()
    cut = members[1]
    before = job.coordinator.epochs()[-1]["epoch"]
    cut_at = time.time()
    hosts.cut(cut.host)
    try:
        regroup_after(job, cut_at, before)
    finally:
        hosts.heal(cut.host)
    # Healed: its next packet meets connections the others closed; it must learn and leave.
    assert_sent_away(job, cut.member_id, before, job.ranks.outcome(cut.member_id, timeout_s=120))
    job.finish([m.member_id for m in members if m is not cut])


@pytest.mark.slow
@pytest.mark.parametrize("job", [10.0], indirect=True, ids=["default-heartbeat"])
def test_a_slow_then_lossy_link_evicts_nobody(job: HostJob, hosts: HostCluster) -> None:
    """tbf at 2 Mbit/s each way on one host, first queueing up to 300 ms (a slow, congested
    link), then dropping what exceeds a 3 kB queue (a lossy one: the gradient exchange loses
    packets and TCP resends them): its exchanges and pings are late, never 10 s (the default
    heartbeat timeout) late. One job through both, 20 steps each."""
    hosts.slow("n3", rate="2mbit", latency="300ms")
    job.start()
    members = job.coordinator.current_members()
    for link in ({"latency": "300ms"}, {"queue_bytes": 3000}):
        hosts.slow("n3", rate="2mbit", **link)  # tc replace: the other bound at once
        start = job.coordinator.last_step()
        assert job.coordinator.wait_for(lambda c: c.last_step() >= start + 20, 180), link
    hosts.unslow("n3")  # the rest at full speed
    job.finish([m.member_id for m in members])
    kinds = {e["event"] for e in job.coordinator.events()}
    assert not kinds & {"lost", "evicted", "rollback"}, job.coordinator.events()
    # Ranks that start late join a group that only grows (a cold start may form before the
    # third arrives); it never shrank.
    sizes = [e["world_size"] for e in job.coordinator.epochs()]
    assert sizes == sorted(sizes) and sizes[-1] == 3, sizes
