"""BackfillProvider against the real local Slurm cluster (6 nodes, partitions batch/harvest)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.demand import DemandContext
from parsl_malleable.harvest.ledger import BlockInfo, Phase
from parsl_malleable.provider import BackfillProvider

from .conftest import Natives, job_states, run_slurm, wait_for, wait_for_backfill_passes

pytestmark = pytest.mark.slurm

Make = Callable[..., BackfillProvider]


def _expected_starts(natives: Natives) -> dict[str, str]:
    states = job_states(natives.cluster, natives.ids)
    return {j: start for j, (state, start) in states.items() if state == "PENDING"}


def _hole_with_reservation(natives: Natives) -> tuple[str, str]:
    """n1,n2 busy for 5 minutes; a 6-node job waits for them (its reservation)."""
    running = natives.submit("-N2", "-t", "5", "--wrap", "sleep 600")
    assert wait_for(lambda: job_states(natives.cluster, [running])[running][0] == "RUNNING", 20)
    big = natives.submit("-N6", "-t", "10", "--wrap", "sleep 5")
    assert wait_for(lambda: _expected_starts(natives).get(big, "N/A") != "N/A", 20)
    return running, big


def _poll_until(provider: BackfillProvider, done: Callable[[], bool], polls: int) -> list[str]:
    """Poll until ``done`` or ``polls`` polls; what each poll did (for failure messages)."""
    reports = []
    for _ in range(polls):
        reports.append(repr(provider.poll_once()))
        if done():
            break
        time.sleep(1.0)  # between polls, as the provider's own thread would pace them
    return reports


def test_holes_get_filled_without_moving_any_queued_job(natives: Natives, providers: Make) -> None:
    _running, big = _hole_with_reservation(natives)
    before = _expected_starts(natives)
    reservation = float(before[big])
    provider = providers(autostart=False)
    slots = [provider.submit("sleep 600", 1, f"parsl.htex.block-{i}") for i in range(3)]

    def all_running() -> bool:
        return sum(b.phase is Phase.RUNNING for b in provider.blocks()) >= 2

    reports = _poll_until(provider, all_running, 30)
    blocks = [b for b in provider.blocks() if b.phase is Phase.RUNNING]
    harvested = sorted(n for b in blocks for n in b.nodes)
    assert len(harvested) >= 3, "\n".join(reports)
    assert set(harvested) <= {"n3", "n4", "n5", "n6"}
    for b in blocks:
        assert b.deadline is not None and b.deadline <= reservation
    # Every job of ours started at once: none is left pending in the queue.
    assert all(r.start is not None for r in provider.history() if r.phase is not Phase.ENDED)
    # Let Slurm's backfill pass (every 2 s) re-plan with our blocks running.
    wait_for_backfill_passes(natives.cluster, 2)
    assert _expected_starts(natives) == before
    statuses = provider.status(slots)
    assert sum(s.state is P.RUNNING for s in statuses) == len(blocks)
    # Steady state: a poll with nothing to do costs the snapshot's three queries (sinfo,
    # squeue, and scontrol for reservations, read by default).
    provider.poll_once()
    report = provider.poll_once()
    assert report.error == "" and report.queries == 3


def test_a_block_in_the_way_yields_within_one_poll(natives: Natives, providers: Make) -> None:
    running, big = _hole_with_reservation(natives)
    drained: list[BlockInfo] = []
    provider = providers(on_yield=drained.append)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    assert wait_for(lambda: any(b.phase is Phase.RUNNING for b in provider.blocks()), 30)
    block = next(b for b in provider.blocks() if b.phase is Phase.RUNNING)
    run_slurm(natives.cluster, "scancel", running)  # the native job ends early
    assert wait_for(lambda: job_states(natives.cluster, [big])[big][0] == "RUNNING", 40)
    record = next(r for r in provider.history() if r.job_id == block.job_id)
    assert record.cancel_reason is not None and record.cancel_reason.value == "yield"
    # The cancel went out before the poll after the one that decided to yield.
    assert record.yield_poll is not None and record.cancel_poll == record.yield_poll
    assert [d.job_id for d in drained] == [block.job_id]
    assert drained[0].block_id == "0" and drained[0].deadline == block.deadline

    def end_of_block() -> P | None:
        # By job, not by slot: the slot may already hold its next job.
        return next(r.end_state for r in provider.history() if r.job_id == block.job_id)

    assert wait_for(lambda: end_of_block() is not None, 30)
    assert end_of_block() is P.TIMEOUT  # a yield is a preemption, never a failure
    # USR1 reached the block's batch shell before the cancel (the ranks' cue to checkpoint).
    assert (Path(provider.script_dir) / f"usr1-{block.job_id}").exists()


def test_status_mapping_cancelled_and_vanished(
    natives: Natives, providers: Make, tmp_path: Path
) -> None:
    # In "vanish" mode squeue answers everything except "what happened to these jobs"
    # (--jobs), and scontrol knows no job: finished jobs vanish, as after MinJobAge.
    real = run_slurm(natives.cluster, "sh", "-c", "command -v squeue").strip()
    real_scontrol = run_slurm(natives.cluster, "sh", "-c", "command -v scontrol").strip()
    mode = tmp_path / "mode"
    mode.write_text("real")
    env = _wrapper(
        tmp_path,
        "squeue",
        f'if [ "$(cat {mode})" = vanish ]; then case "$*" in *--jobs*) exit 0;; esac; fi\n'
        f'exec {real} "$@"',
    )
    _wrapper(
        tmp_path,
        "scontrol",
        f'if [ "$(cat {mode})" = vanish ]; then case "$*" in "show job"*)\n'
        '  echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1;; esac; fi\n'
        f'exec {real_scontrol} "$@"',
    )
    provider = providers(autostart=False, recycle=False, env={**natives.cluster.env, **env})
    cancelled = provider.submit("sleep 600", 1, "parsl.htex.block-0")
    vanished = provider.submit("sleep 600", 1, "parsl.htex.block-1")
    closed = provider.submit("sleep 600", 1, "parsl.htex.block-2")

    def running() -> bool:
        blocks = provider.blocks()
        return len(blocks) == 3 and all(b.phase is Phase.RUNNING for b in blocks)

    reports = _poll_until(provider, running, 30)
    assert running(), (reports, provider.blocks())
    jobs = {b.slot_id: b.job_id for b in provider.blocks()}
    # Someone else (an operator) cancels a block: CANCELLED, not FAILED.
    run_slurm(natives.cluster, "scancel", jobs[cancelled])
    # Until seen (the poll budget is room for a loaded machine, where Slurm can list a
    # cancelled job as completing for several polls; CI once took more than 6).
    reports = _poll_until(provider, lambda: provider.ended_as(cancelled) is not None, 30)
    assert provider.ended_as(cancelled) is not None, reports
    status = provider.status([cancelled])[0]
    assert status.state is P.CANCELLED and "cancelled outside" in (status.message or "")
    # A block that ends and is forgotten before we look, well before its limit.
    mode.write_text("vanish")
    run_slurm(natives.cluster, "scancel", jobs[vanished])
    reports = _poll_until(provider, lambda: provider.ended_as(vanished) is not None, 30)
    assert provider.ended_as(vanished) is not None, reports
    status = provider.status([vanished])[0]
    assert status.state is P.COMPLETED and "outcome unknown" in (status.message or "")
    # Parsl's own scale-in.
    assert provider.status([closed])[0].state is P.RUNNING
    assert provider.cancel([closed]) == [True]
    assert provider.status([closed])[0].state is P.CANCELLED
    assert provider.status(["no-such-slot"])[0].state is P.UNKNOWN


def _wrapper(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    """A stand-in ``name`` first on PATH; the env that puts it there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_hung_or_garbled_squeue_costs_a_poll_not_the_run(
    natives: Natives, providers: Make, tmp_path: Path
) -> None:
    real = run_slurm(natives.cluster, "sh", "-c", "command -v squeue").strip()
    mode = tmp_path / "mode"
    mode.write_text("hang")
    env = _wrapper(
        tmp_path,
        "squeue",
        f'case "$(cat {mode})" in\n'
        "  hang) exec sleep 60;;\n"
        "  garbage) echo 'this is|not squeue'; exit 0;;\n"
        "esac\n"
        f'exec {real} "$@"',
    )
    provider = providers(autostart=False, env={**natives.cluster.env, **env}, command_timeout_s=2)
    slot = provider.submit("sleep 600", 1, "parsl.htex.block-0")
    hung = provider.poll_once()
    assert "timed out after 2 s" in hung.error
    mode.write_text("garbage")
    garbled = provider.poll_once()
    assert "unparseable output" in garbled.error
    assert provider.status([slot])[0].state is P.PENDING
    mode.write_text("ok")
    _poll_until(provider, lambda: any(b.phase is Phase.RUNNING for b in provider.blocks()), 30)
    assert provider.status([slot])[0].state is P.RUNNING
    assert provider.last_error == ""


def test_a_demand_callback_decides_the_node_count(natives: Natives, providers: Make) -> None:
    seen: list[DemandContext] = []

    def one_node(ctx: DemandContext) -> int:
        seen.append(ctx)
        return 1

    provider = providers(autostart=False, demand=one_node)
    for i in range(3):
        provider.submit("sleep 600", 1, f"parsl.htex.block-{i}")
    _poll_until(provider, lambda: any(b.phase is Phase.RUNNING for b in provider.blocks()), 30)
    provider.poll_once()
    assert sum(len(b.nodes) for b in provider.blocks()) == 1
    assert seen[0].node_cap == 6 and seen[0].held_nodes == 0
    assert sorted(n for w in seen[0].windows for n in w.nodes) == [f"n{i}" for i in range(1, 7)]
    assert seen[-1].held_nodes == 1 and len(seen[-1].blocks) == 1
