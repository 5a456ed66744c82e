"""Reported metrics survive a grow, a lost peer, a shrink, the loss of every rank and a new
driver: each step 1..N is stored once, from the timeline that was finally committed.

Rank processes (``tests/elastic/metrics_rank.py``) run around a coordinator in the test process,
as ``test_ddp_resize.py``'s do; the campaign's store (a real ``CampaignStore``) takes the
coordinator's reports the way the campaign runner does, across two coordinators (a driver
killed and started again). The lead rank reports, every step, a chain value that a stale report
would break (see the rank script).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.membership import OUT
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from tests.elastic import elastic_scenario as sc

RANK = Path(__file__).with_name("metrics_rank.py")
REPO = Path(__file__).resolve().parents[2]
# Paced at 0.1 s a step while the test drives, the group cannot reach this during the drive
# (150 s); the rest runs unpaced in seconds.
TOTAL = 1500
JOB = "reporter"


class Ranks:
    """Rank processes of one coordinator, started and killed by the test."""

    def __init__(self, coordinator: Coordinator, checkpoints: Path, pace: Path) -> None:
        self.coordinator = coordinator
        self.args = [str(checkpoints), str(TOTAL), str(pace)]
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, count: int) -> None:
        host, port = self.coordinator.address
        env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
        env["OMP_NUM_THREADS"] = "1"
        for _ in range(count):
            name = uuid.uuid4().hex[:8]
            cmd = [sys.executable, str(RANK), host, str(port), self.coordinator.token, name]
            self.procs[name] = subprocess.Popen(
                [*cmd, *self.args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip

    def outcome(self, name: str, timeout_s: float = 180) -> dict[str, Any]:
        out, err = self.procs[name].communicate(timeout=timeout_s)
        lines = [line for line in out.splitlines() if line.startswith("outcome ")]
        assert lines, f"rank {name} printed no outcome; stderr: {err[-3000:]}"
        return json.loads(lines[-1].split(" ", 1)[1])

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def _coordinator() -> Coordinator:
    coordinator = Coordinator(
        TorchRendezvousHost(), min_nodes=1, max_nodes=4, settle_s=0.3, heartbeat_timeout_s=5.0
    )
    coordinator.start()
    return coordinator


def _persist(store: CampaignStore, coordinator: Coordinator, run: int) -> int | None:
    changes = coordinator.take_metrics()
    store.record_metrics(JOB, run, changes.cut, changes.records)
    return changes.cut


def _lost_all(coordinator: Coordinator) -> bool:
    return all(m.phase in OUT for m in coordinator.members())


@pytest.mark.slow
def test_reports_survive_resizes_a_lost_peer_and_a_resume_without_gaps_or_duplicates(
    tmp_path: Path,
) -> None:
    pace = tmp_path / "pace"
    pace.touch()
    checkpoints = tmp_path / "checkpoints"
    store = CampaignStore(tmp_path)
    first = _coordinator()
    ranks = Ranks(first, checkpoints, pace)
    second: Coordinator | None = None
    later: Ranks | None = None
    try:
        job = SimpleNamespace(coordinator=first)
        ranks.start(2)
        sc.wait_size(job, 2, progress=3)
        ranks.start(1)
        sc.wait_size(job, 3, progress=3)
        _persist(store, first, run=1)  # the runner takes reports as they come
        persisted = max(row["step"] for row in store.metrics(JOB))
        members = first.current_members()
        os.kill(members[1].pid, signal.SIGKILL)  # a lost node: the group rolls back
        sc.wait_size(job, 2, progress=3)
        members = first.current_members()
        first.drain(member_ids=[members[1].member_id])  # a planned shrink
        sc.wait_size(job, 1, progress=3)
        # Every rank lost between two disk checkpoints (every 20 steps): the reports after the
        # newest one belong to a timeline that the resume abandons; a checkpoint after the
        # last stored report holds reports only the state kept.
        assert first.wait_for(
            lambda c: c.last_step() >= persisted + 20 and 5 <= c.last_step() % 20 <= 14, 60
        )
        os.kill(first.current_members()[0].pid, signal.SIGKILL)
        assert first.wait_for(_lost_all, 30), first.members()
        # The driver dies before it stores what came after its last sample: those reports
        # are only in the committed state the ranks checkpointed.
        reported_before = first.last_step()
        first.close()  # the driver is gone; a new one starts with a new coordinator

        second = _coordinator()
        later = Ranks(second, checkpoints, pace)
        later.start(2)
        sc.wait_size(SimpleNamespace(coordinator=second), 2, progress=3)
        base = _persist(store, second, run=2)
        pace.unlink()
        outcomes = [later.outcome(name) for name in later.procs]
        _persist(store, second, run=2)
    finally:
        ranks.close()
        if later is not None:
            later.close()
        first.close()
        if second is not None:
            second.close()

    finished = [o["value"] for o in outcomes if o["status"] == "finished" and o["value"]]
    assert finished, outcomes
    rows = store.metrics(JOB)
    store.close()
    steps = [row["step"] for row in rows]
    assert steps == list(range(1, TOTAL + 1)), "gaps or duplicates in the stored steps"
    chain = 0.0
    for row in rows:
        assert row["prev"] == chain, f"step {row['step']}: a report of an abandoned timeline"
        chain = row["chain"]
    assert chain == finished[0]["chain"]
    # The resume started from the disk checkpoint behind what had been reported: the reports
    # above it were replaced by the new driver's. The ones the first driver never stored
    # (after its last sample, up to the checkpoint) came to the new one from the checkpoint.
    assert base is not None and persisted < base < reported_before, (
        persisted,
        base,
        reported_before,
    )
    assert {row["run"] for row in rows if row["step"] > persisted} == {2}
    print(
        f"stored up to {persisted}, resumed from {base} after reports up to {reported_before}; "
        f"{len(rows)} steps"
    )
