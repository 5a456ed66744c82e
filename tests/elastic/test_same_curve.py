"""Results independent of the node count (issue #35): one config and seed trains to the same
loss curve on 1, 2 and 3 ranks and through a grow (1 -> 3) and a shrink (3 -> 2), by default;
with ``batch="per_rank"`` (the default before, a global batch and learning rate that grow with
the world size) it does not.

The config: the digits MLP (64-32-10) in float64, Adam (lr 0.01), a global batch of 20 taken in
micro-batches of at most 4, 300 optimizer steps (4.4 epochs). 20 samples over 3 ranks split
7/7/6 and the last step of each epoch (1347 = 67 * 20 + 7) 3/2/2, so uneven parts, gradient
accumulation (5, 3 or 2 micro-batches a step) and short steps are all exercised.

Tolerance, ``RTOL`` on every step's loss: the runs see the same samples in every step and
average gradients with exact weights, so they differ only in the order of float64 additions
(within a micro-batch, across micro-batches, across ranks in gloo's allreduce): about 1e-16
relative per step, which 300 Adam steps on this small problem hardly amplify (measured: at
most 3e-15 on 2, 3 and the grown and shrunk ranks). 1e-9 leaves six orders of margin for other
kernels and summation orders, yet fails on anything systematic: one float32 rounding of the
loss alone is 6e-8, and the per_rank run (a batch of 40 at 2 ranks, lr x2) differs at its worst
step by several times the loss itself (measured: 4.7; asserted: over 0.1).

Ranks are processes around coordinators in the test process (``curve_rank.py``), as in
``test_ddp_resize.py``. Three processes serve the five jobs in turn (one torch import each, the
cost that dominates on 2 cores); the two that join the grown group wait for a file, so the
grow costs no start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from tests.elastic import elastic_scenario as sc

RANK = Path(__file__).with_name("curve_rank.py")
REPO = Path(__file__).resolve().parents[2]
STEPS = 300
ARGS = {"steps": STEPS, "batch_size": 20, "micro_batch": 4, "lr": 0.01, "seed": 0}
SETTINGS = {"collective_timeout_s": 15.0, "heartbeat_interval_s": 0.5, "torch_threads": 1}
RTOL = 1e-9


def _coordinator(min_nodes: int, max_nodes: int) -> Coordinator:
    coordinator = Coordinator(
        TorchRendezvousHost(), min_nodes=min_nodes, max_nodes=max_nodes, settle_s=0.3,
        heartbeat_timeout_s=5.0,
    )  # fmt: skip
    coordinator.start()
    return coordinator


def _job(coordinator: Coordinator, settings: dict[str, Any], **args: Any) -> dict[str, Any]:
    host, port = coordinator.address
    return {
        "host": host,
        "port": port,
        "token": coordinator.token,
        "settings": {**SETTINGS, **settings},
        "args": {**ARGS, **args},
    }


def _start(jobs: list[dict[str, Any]]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, str(RANK), json.dumps(jobs)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outcomes(proc: subprocess.Popen, timeout_s: float = 240) -> list[dict[str, Any]]:
    """The outcome of each job the process was a rank of, in order."""
    out, err = proc.communicate(timeout=timeout_s)
    found = [
        json.loads(line.split(" ", 2)[2])
        for line in out.splitlines()
        if line.startswith("outcome ")
    ]
    assert found, f"a rank printed no outcome; stderr: {err[-3000:]}"
    return found


def _worst(curve: list[float], reference: list[float]) -> float:
    """The largest relative difference between two loss curves."""
    return max(abs(a - b) / abs(b) for a, b in zip(curve, reference, strict=True))


@pytest.mark.slow
def test_one_config_trains_to_the_same_loss_curve_on_any_world_size(tmp_path: Path) -> None:
    one, two, three = (_coordinator(n, n) for n in (1, 2, 3))
    per_rank = _coordinator(2, 2)
    elastic = _coordinator(1, 3)
    coordinators = [one, two, three, per_rank, elastic]
    pace, go = tmp_path / "pace", tmp_path / "go"
    pace.touch()
    old = {"batch": "per_rank"}  # the default before: the batch per rank, lr scaled
    paced = {"pace_file": str(pace), "step_delay_s": 0.05}
    jobs = {name: _job(c, {}) for name, c in (("1", one), ("2", two), ("3", three))}
    jobs["per_rank"] = _job(per_rank, old)
    jobs["elastic"] = _job(elastic, {}, **paced)
    joining = {**jobs["elastic"], "go": str(go)}
    plans = [
        ["1", "2", "3", "per_rank", "elastic"],  # rank 0 of every job
        ["2", "3", "per_rank", "joining"],
        ["3", "joining"],
    ]
    procs = [_start([joining if n == "joining" else jobs[n] for n in plan]) for plan in plans]
    try:
        job = SimpleNamespace(coordinator=elastic)
        sc.wait_size(job, 1, progress=3, timeout_s=180)
        go.touch()
        sc.wait_size(job, 3, progress=3)
        members = elastic.current_members()
        elastic.drain(member_ids=[members[1].member_id])
        sc.wait_size(job, 2, progress=3)
        pace.unlink()
        results = [_outcomes(proc) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        for coordinator in coordinators:
            coordinator.close()

    assert all(o["status"] in ("finished", "left") for r in results for o in r), results
    curves = {name: o["value"] for name, o in zip(plans[0], results[0], strict=True)}
    reference = curves["1"]["losses"]
    assert reference[-1] < 0.5 * reference[0], reference[::50]  # it trains
    worst = {name: _worst(c["losses"], reference) for name, c in curves.items()}
    print("largest relative difference from the 1-rank curve:", worst)
    for n in (2, 3):
        assert curves[str(n)]["sizes"] == [n] * STEPS
        assert worst[str(n)] <= RTOL, n
    # The grow and the shrink happened mid-run, and changed nothing. The two joiners are separate
    # processes: on a loaded machine one can arrive after the other's commit (a settle of 0.3 s),
    # so the grow may pass through 2 (CI once saw [1, 2, 3, 2]); either way it grows to 3, then
    # shrinks to 2.
    sizes = curves["elastic"]["sizes"]
    changes = [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]]
    assert changes in ([1, 3, 2], [1, 2, 3, 2]), changes
    assert worst["elastic"] <= RTOL
    # No learning-rate scaling by default, through any resize.
    assert {curves[n]["lr"] for n in ("1", "2", "3", "elastic")} == {ARGS["lr"]}

    # The old default: the global batch (40) and the learning rate (x2) follow the world size.
    assert curves["per_rank"]["lr"] == pytest.approx(2 * ARGS["lr"])
    assert worst["per_rank"] > 0.1
