"""A rank that hangs instead of dying (SIGSTOP: a GPU or driver hang, an NFS stall, a node
swapping), then runs again (SIGCONT).

Its sockets stay open, so only the missing heartbeats tell the coordinator. What must hold:
the survivors train again within the heartbeat timeout plus a regroup, not at the collective
timeout (set to 60 s here, far above); no committed step is lost and no sample trained twice;
the rank that comes back is told to leave and exits, never waits; the owner's warnings say so.
Ranks are real processes around a coordinator in the test (``rank_procs``); checkpoints on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from parsl_malleable.elastic.checkpoint import LOCK_FILE_NAME, CheckpointStore
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from tests.elastic import elastic_scenario as sc
from tests.elastic.rank_procs import Ranks

EPOCHS = 6
HEARTBEAT_TIMEOUT_S = 3.0
# Without an abort the survivors would sit in the collective this long: far above the target.
COLLECTIVE_TIMEOUT_S = 60.0
SLOW_LEAVE_S = 15.0  # a woken rank exits in about a second; past this its stacks are taken
# The target is the heartbeat timeout plus one regroup (about 1-2 s idle); the rest is room for
# a loaded 2-core machine, still well under the collective timeout.
REGROUP_LIMIT_S = HEARTBEAT_TIMEOUT_S + 15.0


@pytest.mark.slow
@pytest.mark.parametrize("frozen_rank", [1, 0], ids=["rank1", "rank0-the-saver"])
def test_a_frozen_rank_is_dropped_fast_and_sent_away_when_it_wakes(
    tmp_path: Path, frozen_rank: int
) -> None:
    coordinator = Coordinator(
        TorchRendezvousHost(), min_nodes=1, max_nodes=3, settle_s=0.3,
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
    )  # fmt: skip
    coordinator.start()
    pace = tmp_path / "pace"
    pace.touch()
    checkpoints = tmp_path / "ckpt"
    settings = {
        "collective_timeout_s": COLLECTIVE_TIMEOUT_S,
        "heartbeat_interval_s": 0.5,
        "torch_threads": 1,
        "checkpoint_dir": str(checkpoints),
        "checkpoint_every": 5,
    }
    args = {"epochs": EPOCHS, "batch_size": 32, "lr": 0.02, "seed": 0}
    ranks = Ranks(coordinator, {**args, "pace_file": str(pace), "step_delay_s": 0.05}, settings)
    job = SimpleNamespace(coordinator=coordinator)
    frozen_pid = None
    try:
        ranks.start(3)
        sc.wait_size(job, 3, progress=10)
        members = coordinator.current_members()
        frozen = members[frozen_rank]
        frozen_pid = frozen.pid
        survivors = [m.member_id for m in members if m.member_id != frozen.member_id]
        before = coordinator.epochs()[-1]["epoch"]
        stopped_at = time.time()
        os.kill(frozen_pid, signal.SIGSTOP)
        sc.wait_size(job, 2, progress=1, timeout_s=COLLECTIVE_TIMEOUT_S + 30)
        regrouped = [e for e in coordinator.epochs() if e["epoch"] > before and e["resumed_at"]]

        os.kill(frozen_pid, signal.SIGCONT)
        woken_at = time.time()
        # Usually gone in about a second; under load its gloo allreduce can sit in a send to a
        # peer whose sockets are gone until the collective timeout (docs/elastic.md): bounded
        # by that.
        came_back, stacks = ranks.outcome_or_stacks(
            frozen.member_id, frozen_pid, SLOW_LEAVE_S, timeout_s=COLLECTIVE_TIMEOUT_S + 30
        )
        if stacks:  # the evidence for the next look (a warning in the run's summary)
            warnings.warn(
                f"woken rank slow to exit: {time.time() - woken_at:.1f} s after SIGCONT; its "
                f"stacks {SLOW_LEAVE_S:.0f} s after:\n{stacks[-20000:]}",
                stacklevel=1,
            )
        frozen_pid = None
        pace.unlink()
        result = ranks.outcome(survivors[0])
        other = ranks.outcome(survivors[1])
    finally:
        if frozen_pid is not None:
            os.kill(frozen_pid, signal.SIGCONT)
        ranks.close()
        coordinator.close()

    # The survivors' next step: after the heartbeat timeout, long before the collective's.
    waited = regrouped[0]["resumed_at"] - stopped_at
    print(f"frozen rank {frozen_rank}: next step at world 2 after {waited:.1f} s")
    assert HEARTBEAT_TIMEOUT_S - 1 <= waited <= REGROUP_LIMIT_S, (waited, regrouped)
    assert regrouped[0]["world_size"] == 2
    # No committed step lost: the new group starts from the last step the old one committed.
    old = next(e for e in coordinator.epochs() if e["epoch"] == before)
    assert regrouped[0]["start_step"] >= old["last_step"], (old, regrouped[0])
    # The rank that woke was sent away (it left; it did not wait or join a group again).
    assert came_back["status"] == "left", came_back
    assert all(frozen.member_id not in e["members"] for e in regrouped)
    events = coordinator.events()
    assert any(e["event"] == "lost" and e["member"] == frozen.member_id for e in events)
    assert any(e["event"] == "sent_away" and e["member"] == frozen.member_id for e in events)
    assert any("came back" in w and frozen.member_id in w for w in coordinator.warnings())
    # The job finished on the survivors, every sample trained exactly once in every epoch.
    assert {result["status"], other["status"]} == {"finished"}, (result, other)
    value = next(r["value"] for r in (result, other) if r["value"] is not None)
    assert value["seen_min"] == [1.0] * EPOCHS, value["seen_min"]
    assert value["seen_max"] == [1.0] * EPOCHS, value["seen_max"]
    # The woken rank wrote no stale checkpoint over the survivors' newer ones.
    saved = [info for info in CheckpointStore(checkpoints).list() if info.committed]
    by_time = [info.step for info in sorted(saved, key=lambda i: i.path.stat().st_mtime_ns)]
    assert by_time == sorted(by_time) and by_time[-1] >= old["last_step"], by_time


HOLD_LOCK = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.mark.slow
def test_a_save_frozen_holding_the_folder_lock_stalls_no_group(tmp_path: Path) -> None:
    """A former rank 0 frozen in the middle of a save holds the checkpoint folder's lock. The
    group's periodic saves must give up on it quickly (counted, the next replaces them) instead
    of waiting the lock's 60 s inside a step, past the peers' collective timeout (then: a
    rollback at every checkpoint)."""
    checkpoints = tmp_path / "ckpt"
    coordinator = Coordinator(
        TorchRendezvousHost(), min_nodes=1, max_nodes=2, settle_s=0.3, heartbeat_timeout_s=5.0
    )
    coordinator.start()
    settings = {"collective_timeout_s": 15.0, "heartbeat_interval_s": 0.5, "torch_threads": 1,
                "checkpoint_dir": str(checkpoints), "checkpoint_every": 5}  # fmt: skip
    pace = tmp_path / "pace"
    pace.touch()
    ranks = Ranks(
        coordinator,
        {"epochs": 2, "batch_size": 32, "lr": 0.02, "seed": 0, "pace_file": str(pace),
         "step_delay_s": 0.02},
        settings,
    )  # fmt: skip
    job = SimpleNamespace(coordinator=coordinator)
    holder: subprocess.Popen[str] | None = None
    try:
        names = ranks.start(2)
        sc.wait_size(job, 2, progress=6)  # training, and a first checkpoint written
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(checkpoints / LOCK_FILE_NAME)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # Four periodic saves refused by the held lock, at most a couple of seconds each.
        sc.wait_size(job, 2, progress=20, timeout_s=60)
        held_until = coordinator.last_step()
        holder.kill()  # the frozen saver dies: its lock goes with it
        holder.wait(timeout=30)
        pace.unlink()
        outcomes = [ranks.outcome(name) for name in names]
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        ranks.close()
        coordinator.close()
    assert {o["status"] for o in outcomes} == {"finished"}, outcomes
    kinds = [e["event"] for e in coordinator.events()]
    assert "rollback" not in kinds and "lost" not in kinds, coordinator.events()
    # Once the lock was free, checkpoints were written again.
    saved = [i.step for i in CheckpointStore(checkpoints).list() if i.committed]
    assert saved and saved[-1] > held_until, (saved, held_until)
