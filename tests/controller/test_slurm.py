"""Three malleable jobs on one BackfillProvider on the real local Slurm cluster.

Blocks appear, one set yields to a native job, others reach their walltime; the controller
decides with the allocator which job runs on which node, and every job still trains to the
end. Needs ``scripts/slurm-cluster start`` (CI runs it).
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import parsl
import pytest
from parsl.config import Config
from parsl.jobs.states import JobState as P

from parsl_malleable.app import malleable_app
from parsl_malleable.controller import CoreSettings, configure
from parsl_malleable.controller.phases import PHASE_ORDER, BlockPhase
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider, harvest_executor
from tests.elastic import elastic_scenario as sc
from tests.provider.conftest import Natives, job_states, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def native_started(natives: Natives, job_id: str) -> bool:
    """Whether the native job ran (squeue forgets a job soon after it ends, and errs)."""
    try:
        state = job_states(natives.cluster, [job_id]).get(job_id, ("GONE", ""))[0]
    except subprocess.CalledProcessError:
        state = "GONE"
    return state in ("RUNNING", "COMPLETING", "COMPLETED", "GONE")


REPO = Path(__file__).resolve().parents[2]
# Block start (Slurm's) -> a rank's first step. Measured here: 8-12 s for a later block, 26-38 s
# for the first wave (six worker pools and agents importing Parsl and torch at once on 2 cores)
# on an idle machine, up to 68 s in CI with the other test worker busy (issue #37 has the
# start-up targets). Far above this, something waits that should not: a hang, not load.
STARTUP_BOUND_S = 120.0
# name: (hidden layer, max nodes, epochs); six nodes fit all three at their maximum. Training is
# paced (0.15 s a step, at least 190 s for the one-node job) until the test has seen a yield and a
# drain before a block's deadline, then runs the rest at full speed: with a fixed pace it either
# ended before any deadline (nothing drained) or long after (the test waited for it).
JOBS = {
    "small": ((64,), 1, 30),
    "medium": ((128,), 2, 16),
    "large": ((256,), 3, 20),
}


def test_three_jobs_follow_the_allocator_through_yields_and_timeouts(
    natives: Natives, providers: Callable[..., BackfillProvider], tmp_path: Path
) -> None:
    sc.environment_ready()
    provider = providers(
        slots=3,
        poll_interval_s=2,
        yield_grace_s=1,
        max_walltime_s=120,
        worker_init=f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
    )
    htex = harvest_executor(provider)
    config = Config(executors=[htex], run_dir=str(tmp_path / "runinfo"), strategy_period=1)
    samples: list[dict] = []
    native_submitted = False
    with parsl.load(config):
        controller = configure(htex, settings=CoreSettings(drain_margin_s=20.0))
        jobs = {}
        pace = tmp_path / "pace"
        pace.touch()
        for seed, (name, (hidden, max_nodes, epochs)) in enumerate(JOBS.items()):
            app = malleable_app(
                checkpoint_dir=str(tmp_path / name),
                max_nodes=max_nodes,
                checkpoint_every=50,
                settle_s=1.0,
            )(sc.train_paced)
            jobs[name] = app.submit(
                pace_file=str(pace),
                step_delay_s=0.15,
                epochs=epochs,
                hidden=hidden,
                seed=seed,
                name=name,
            )
        began = time.monotonic()
        while not all(job.ended for job in jobs.values()):
            state = controller.state()
            decision = controller.decisions[-1] if controller.decisions else None
            samples.append(
                {
                    "t": time.monotonic() - began,
                    "decision": decision.number if decision else 0,
                    "target": {n: len(decision.nodes_of(n)) for n in JOBS} if decision else {},
                    "nodes": {
                        n: j["rank_nodes"] for n, j in state["jobs"].items() if "rank_nodes" in j
                    },
                    "world": {n: j.get("world_size", 0) for n, j in state["jobs"].items()},
                }
            )
            running = sum(1 for j in state["jobs"].values() if j.get("world_size"))
            if not native_submitted and running == 3 and samples[-1]["t"] > 30:
                # A native job that needs three nodes: the blocks in its way must yield.
                native = natives.submit("-N3", "-t", "1", "--wrap", "sleep 15")
                native_submitted = True
            drained = any("near its deadline" in d.reason for d in controller.decisions)
            if native_submitted and drained and pace.exists():
                pace.unlink()  # both paths seen: the rest of training at full speed
            assert samples[-1]["t"] < 600, samples[-1]  # a hang, not a slow run
            time.sleep(0.5)
        results = {name: job.future.result(timeout=60) for name, job in jobs.items()}

        def some_block_timed_out() -> bool:
            return any(
                r.cancel_reason is None and r.end_state is P.TIMEOUT for r in provider.history()
            )

        # A fast run can end before any block's walltime: then wait for the first block still
        # running to reach it, so the walltime path is always exercised.
        deadlines = [b.deadline for b in provider.blocks() if b.deadline is not None]
        if not some_block_timed_out() and deadlines:
            wait_for(some_block_timed_out, max(0.0, min(deadlines) - time.time()) + 60)
        history = provider.history()

    assert native_submitted
    assert native_started(natives, native)

    # Blocks appeared, yielded to the native job, and reached their walltime during the run.
    assert len(history) >= 4, history
    assert any(r.cancel_reason is CancelReason.YIELD for r in history), history
    ended = [r for r in history if r.cancel_reason is None and r.end_state is not None]
    timed_out = [r for r in ended if r.end_state is P.TIMEOUT]
    assert timed_out, history
    # Slurm ended them at their walltime (squeue said TIMEOUT, not just "gone near the limit"),
    # and --signal=B:USR1@<signal_margin_s> reached each batch shell before the end. (This run
    # proves what the provider tests' own one-minute walltime test used to.)
    for record in timed_out:
        assert record.walltime_s <= 120, record
        assert "walltime reached (TIMEOUT)" in record.message, record
        assert (Path(provider.script_dir) / f"usr1-{record.job_id}").exists(), record
    reasons = " ".join(d.reason for d in controller.decisions)
    assert "yields" in reasons and "near its deadline" in reasons, reasons

    # No node ever ran ranks of two jobs at once.
    for sample in samples:
        placed = [node for nodes in sample["nodes"].values() for node in nodes]
        assert len(placed) == len(set(placed)), sample

    # Each decision that stayed in force for 10 s was carried out: the jobs' world sizes
    # reached the allocator's per-job answer. Only jobs whose ranks had begun training in
    # it count: a first start can take longer than 10 s on a loaded 2-core machine (CI saw
    # every world at 0 through a whole tenure), and is bounded below by STARTUP_BOUND_S.
    tenures: dict[int, list[dict]] = {}
    for sample in samples:
        tenures.setdefault(sample["decision"], []).append(sample)
    checked = 0
    for number, seen in tenures.items():
        if number == 0 or seen[-1]["t"] - seen[0]["t"] < 10:
            continue
        target = seen[0]["target"]
        live = {n for n in target if any(s["world"].get(n, 0) for s in seen)}
        assert any(all(s["world"].get(n, 0) == target[n] for n in live) for s in seen), (
            number,
            target,
            [s["world"] for s in seen],
        )
        checked += 1
    assert checked >= 2, tenures.keys()

    for name, result in results.items():
        assert result["test_accuracy"] >= 0.95, (name, result)

    # Every block that trained went through its phases in order, as the controller recorded
    # them; a rank's first step followed its block's start within a bound (printed).
    events = controller.phases.events()
    trained = {(e.block, e.node) for e in events if e.phase is BlockPhase.FIRST_STEP}
    assert trained, events
    delays = []
    breakdown: list[str] = []  # where a slow start spent its time, for the failure message
    complete = 0
    for block, node in sorted(trained):
        stamps = {e.phase: e.time for e in events if e.block == block and e.node in ("", node)}
        order = [p for p in PHASE_ORDER if p in stamps]
        times = [stamps[p] for p in order]
        assert times == sorted(times), (block, node, stamps)  # whatever was seen, in order
        assert {BlockPhase.JOINED, BlockPhase.FIRST_STEP} <= set(stamps), (block, node, stamps)
        if order[:5] == list(PHASE_ORDER[:5]):
            complete += 1
            delays.append(stamps[BlockPhase.FIRST_STEP] - stamps[BlockPhase.RUNNING])
            steps = itertools.pairwise(PHASE_ORDER[1:5])
            breakdown.append(
                f"{block}/{node}: "
                + " ".join(f"{b.value} +{stamps[b] - stamps[a]:.1f}" for a, b in steps)
            )
        else:
            print(f"block {block} on {node}: phases seen {[p.value for p in order]}")
    # A block that starts and ends between two of the provider's polls is never listed as
    # running: its submitted/running stamps are missing, the rest must still be in order.
    assert complete >= len(trained) / 2, (complete, len(trained))
    print(f"block start -> first step: max {max(delays):.1f} s over {len(delays)} nodes")
    print("\n".join(breakdown))
    assert max(delays) < STARTUP_BOUND_S, breakdown
    assert controller.phases.training_s() > 0
