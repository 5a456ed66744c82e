"""``ctx.wrap`` (DDP) with a DataLoader over an ``ElasticDistributedSampler``, driven 2 -> 4 -> 1
-> 3 ranks with a SIGKILL on the way: every sample is trained exactly once per epoch, and the
accuracy is that of an uninterrupted run within one point.

Ranks are real processes (``tests/elastic/ddp_rank.py``) around a coordinator in the test
process, without Parsl blocks, which keeps the run short; the block-level path is
``test_world_size.py``'s. Training is paced (a pause per step) until the drive is over.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from tests.elastic import elastic_scenario as sc
from tests.elastic.rank_procs import Ranks

EPOCHS = 12
ARGS = {"epochs": EPOCHS, "batch_size": 32, "lr": 0.02, "seed": 0}
SETTINGS = {"collective_timeout_s": 15.0, "heartbeat_interval_s": 0.5, "torch_threads": 1}


def _coordinator(max_nodes: int) -> Coordinator:
    coordinator = Coordinator(
        TorchRendezvousHost(), min_nodes=1, max_nodes=max_nodes, settle_s=0.3,
        heartbeat_timeout_s=5.0,
    )  # fmt: skip
    coordinator.start()
    return coordinator


@pytest.mark.slow
def test_ddp_dataloader_through_2_4_1_3_with_a_kill(tmp_path: Path) -> None:
    # The uninterrupted run: one rank, the same script and seed, alongside the elastic one.
    ref_coordinator = _coordinator(1)
    reference = Ranks(ref_coordinator, ARGS, SETTINGS)
    coordinator = _coordinator(4)
    pace = tmp_path / "pace"
    pace.touch()
    ranks = Ranks(coordinator, {**ARGS, "pace_file": str(pace), "step_delay_s": 0.08}, SETTINGS)
    job = SimpleNamespace(coordinator=coordinator)
    try:
        (ref_name,) = reference.start(1)
        ranks.start(2)
        sc.wait_size(job, 2, progress=3)
        ranks.start(2)
        sc.wait_size(job, 4, progress=3)

        members = coordinator.current_members()
        os.kill(members[1].pid, signal.SIGKILL)  # a lost node: survivors roll back
        drained = [m.member_id for m in members[2:]]
        coordinator.drain(member_ids=drained)  # planned leave
        sc.wait_size(job, 1, progress=3)
        ranks.start(2)
        sc.wait_size(job, 3, progress=3)
        pace.unlink()

        result = ranks.outcome(members[0].member_id)  # rank 0 throughout: survivors keep order
        ref = reference.outcome(ref_name)
        left = [ranks.outcome(name)["status"] for name in drained]
    finally:
        ranks.close()
        reference.close()
        coordinator.close()
        ref_coordinator.close()

    epochs = coordinator.epochs()
    sizes = [e["world_size"] for e in epochs if e["resumed_at"] is not None]
    collapsed = [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]]
    assert sc_subsequence([2, 4, 1, 3], collapsed), collapsed
    assert any(e["event"] == "lost" for e in coordinator.events())
    assert left == ["left", "left"]

    assert result["status"] == "finished" and ref["status"] == "finished", (result, ref)
    value, ref_value = result["value"], ref["value"]
    # Every sample exactly once in every epoch, across the resizes and the rollback.
    assert value["seen_min"] == [1.0] * EPOCHS, value["seen_min"]
    assert value["seen_max"] == [1.0] * EPOCHS, value["seen_max"]
    assert ref_value["seen_min"] == ref_value["seen_max"] == [1.0] * EPOCHS
    assert value["test_accuracy"] >= 0.94, value
    assert abs(value["test_accuracy"] - ref_value["test_accuracy"]) <= 0.01, (value, ref_value)


def sc_subsequence(wanted: list[int], seen: list[int]) -> bool:
    """Whether ``wanted`` occurs in ``seen`` in order (other sizes may come between)."""
    it = iter(seen)
    return all(any(s == w for s in it) for w in wanted)


@pytest.mark.slow
def test_fp16_scaler_and_accumulation_survive_a_grow_and_a_kill(tmp_path: Path) -> None:
    """fp16 autocast with a GradScaler, two micro-batches per rank and step (a global batch of
    32, at most 8 samples at once: 16 or 11 per rank), 2 -> 3 -> 2 (SIGKILL).

    The scaler's growth tracker counts the optimizer steps since its scale last changed; it is
    committed with the rest, so after the rollback at the kill (the lost step is redone) and on
    the newcomer it still equals the number of committed steps on every rank of the last group.
    """
    epochs = 6
    coordinator = _coordinator(3)
    pace = tmp_path / "pace"
    pace.touch()
    args = {**ARGS, "epochs": epochs, "batch_size": 32, "precision": "fp16", "micro_batch": 8}
    # 43 steps an epoch: paced, the 6 epochs would last 39 s, more than the drive.
    ranks = Ranks(coordinator, {**args, "pace_file": str(pace), "step_delay_s": 0.15}, SETTINGS)
    job = SimpleNamespace(coordinator=coordinator)
    try:
        ranks.start(2)
        sc.wait_size(job, 2, progress=3)
        ranks.start(1)
        sc.wait_size(job, 3, progress=3)
        members = coordinator.current_members()
        os.kill(members[1].pid, signal.SIGKILL)
        sc.wait_size(job, 2, progress=3)
        pace.unlink()
        final = [m.member_id for m in coordinator.current_members()]
        outcomes = [ranks.outcome(name) for name in final]
    finally:
        ranks.close()
        coordinator.close()

    assert any(e["event"] == "rollback" or e["event"] == "lost" for e in coordinator.events())
    assert [o["status"] for o in outcomes] == ["finished", "finished"], outcomes
    values = [o["value"] for o in outcomes]
    steps = values[0]["steps"]
    for value in values:
        assert value["seen_min"] == value["seen_max"] == [1.0] * epochs, value
        assert value["steps"] == steps
        assert value["scaler"]["_growth_tracker"] == steps, (value["scaler"], steps)
        assert value["scaler"]["scale"] == 2.0**10
    assert values[0]["test_accuracy"] >= 0.85, values[0]
