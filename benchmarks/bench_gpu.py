"""The elastic DDP path on GPUs: nccl, one rank per GPU, resizes inside one node.

    python benchmarks/bench_gpu.py                     # on a GPU machine (scripts/gpu-check)
    python benchmarks/bench_gpu.py --device cpu --ranks 2   # the same steps on gloo, to try it

Three parts, each printing its figures:

1. **Baseline**: the CNN of ``apps/cnn.py`` trained by a plain loop on one device (no runtime, no
   process group): samples/s. Measured in the same run as what follows, on the same device.
2. **Throughput and resizes**: one rank process per GPU (``RankSpec(device="cuda:i")``) around a
   coordinator in this process; the torch backend forms nccl groups. The job starts on all GPUs
   but one, grows onto the last, and loses a rank to SIGKILL; printed: samples/s at each group
   size (the coordinator's measurements), and seconds from the newcomer's join (or the kill) to
   the first step at the new size. With one GPU there is no resize to make: the figures are the
   runtime's samples/s on one rank against the baseline. Then the same group with the membership
   check (a coordinator request and a control allreduce) every 10 steps instead of every step
   (``--check-every``): what the check costs a step.
3. **Abort**: a torch backend in this process forms a one-rank group on the device, aborts it
   (what a rank does when a peer of its epoch is lost: ``ProcessGroupNCCL.abort`` on nccl),
   checks that the next collective raises instead of waiting, and forms the next epoch's group:
   seconds from the abort to a reduced tensor on the new group.
4. **Correctness**: a paced job trains to its end through the same resizes and must reach
   better-than-chance test accuracy.

Exit status 0 when parts 3 and 4 pass, 1 when it fails, 2 without a GPU (``--device cuda``). CI has
no GPU and never runs this; docs/benchmarks.md records its figures where a GPU machine was lent.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from parsl_malleable.elastic.coordinator import Coordinator  # noqa: E402
from parsl_malleable.elastic.rank import RankSettings, RankSpec, run_rank  # noqa: E402
from parsl_malleable.elastic.torch_backend import (  # noqa: E402
    TorchBackend,
    TorchRendezvousHost,
)

BATCH = 64  # per rank
PRECISION = {"cuda": "bf16", "cpu": "fp32"}


def _rank(spec: RankSpec, kwargs: dict[str, Any], queue: Any) -> None:
    from apps.cnn import train_elastic

    if spec.device.startswith("cuda"):
        torch.cuda.set_device(spec.local_rank)
    outcome = run_rank(spec, train_elastic, (), kwargs)
    queue.put((spec.member_id, outcome.status, outcome.rank, outcome.value, outcome.reason))


def baseline(device: str, seconds: float) -> float:
    """Samples/s of a plain training loop of the same model, batch and precision."""
    from apps.cnn import load_images, make_model
    from apps.precision import Precision

    x, y, _, _ = load_images()
    dev = torch.device(device)
    model = make_model().to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    amp = Precision(PRECISION[dev.type], dev.type)
    x, y = x.to(dev), y.to(dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(i: int) -> None:
        start = (i * BATCH) % (len(x) - BATCH)
        with amp.autocast():
            loss = loss_fn(model(x[start : start + BATCH]), y[start : start + BATCH])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for i in range(20):  # warm-up: kernels, allocator
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    steps, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        step(steps)
        steps += 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return steps * BATCH / (time.perf_counter() - began)


class Job:
    """A coordinator and the rank processes of one job, one per device."""

    def __init__(
        self, device: str, ranks: int, kwargs: dict[str, Any], check_every: int = 1
    ) -> None:
        self.device, self.kwargs = device, kwargs
        self.coordinator = Coordinator(
            TorchRendezvousHost(), min_nodes=1, max_nodes=ranks, settle_s=1.0
        )
        self.coordinator.start()
        self.settings = RankSettings(
            collective_timeout_s=60, torch_threads=2, check_every=check_every
        )
        self.ctx = mp.get_context("spawn")
        self.queue = self.ctx.Queue()
        self.procs: dict[str, Any] = {}

    def start(self, index: int) -> str:
        host, port = self.coordinator.address
        device = f"cuda:{index}" if self.device == "cuda" else "cpu"
        spec = RankSpec(
            host, port, self.coordinator.token, self.settings, local_rank=index, device=device
        )
        proc = self.ctx.Process(target=_rank, args=(spec, self.kwargs, self.queue))
        proc.start()
        self.procs[spec.member_id] = proc
        return spec.member_id

    def resumed(self, size: int, after: float, timeout_s: float = 300) -> float:
        """Wall clock of the first step of a group of ``size`` formed after ``after``."""

        def stamp() -> float | None:
            for e in self.coordinator.epochs():
                if e["world_size"] == size and e["formed_at"] >= after and e["resumed_at"]:
                    return float(e["resumed_at"])
            return None

        if not self.coordinator.wait_for(lambda c: stamp() is not None, timeout_s):
            raise SystemExit(
                f"no group of {size} within {timeout_s} s: {self.coordinator.epochs()}"
            )
        found = stamp()
        assert found is not None
        return found

    def joined_at(self, member_id: str, timeout_s: float = 300) -> float:
        def stamp() -> float | None:
            for e in self.coordinator.events():
                if e["event"] == "joined" and e["member"] == member_id:
                    return float(e["time"])
            return None

        if not self.coordinator.wait_for(lambda c: stamp() is not None, timeout_s):
            raise SystemExit(f"{member_id} never joined")
        found = stamp()
        assert found is not None
        return found

    def start_all_but_one(self, ranks: int) -> int:
        """Start ranks on every device but the last (one, with one device); their group size
        once it has trained a step."""
        first = max(ranks - 1, 1)
        t = time.time()
        for index in range(first):
            self.start(index)
        self.resumed(first, t)
        return first

    def kill_last(self, size: int) -> float:
        """SIGKILL the newest member of a group of ``size``; seconds to the first step of the
        group of ``size - 1`` that follows."""
        victim = self.coordinator.current_members()[-1]
        t = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        return self.resumed(size - 1, t) - t

    def train_at(self, size: int, seconds: float) -> None:
        """Let the current group train ``seconds`` past its first step (the measurements)."""
        target = self.coordinator.last_step() + 1
        self.coordinator.wait_for(lambda c: c.last_step() >= target, 120)
        deadline = time.monotonic() + seconds
        self.coordinator.wait_for(lambda c: time.monotonic() >= deadline, seconds + 5)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.join(30)
            if proc.is_alive():
                proc.kill()
        self.coordinator.close()


def resizes(device: str, ranks: int, seconds: float) -> dict[str, Any]:
    """Part 2: samples/s per group size; grow and kill latencies (two or more ranks)."""
    job = Job(device, ranks, {"epochs": 100_000, "batch_size": BATCH,
                              "precision": PRECISION[device]})  # fmt: skip
    figures: dict[str, Any] = {}
    try:
        job.train_at(job.start_all_but_one(ranks), seconds)
        if ranks >= 2:
            new = job.start(ranks - 1)
            joined = job.joined_at(new)
            figures["grow_s"] = job.resumed(ranks, joined) - joined
            job.train_at(ranks, seconds)
            figures["kill_s"] = job.kill_last(ranks)
            job.train_at(ranks - 1, seconds)
        rates: dict[int, list[float]] = {}
        for size, rate in job.coordinator.take_measurements()[0]:
            rates.setdefault(size, []).append(rate)
        figures["samples_per_s"] = {n: statistics.median(v) for n, v in sorted(rates.items())}
        job.coordinator.abort("benchmark finished")
    finally:
        job.close()
    return figures


def check_cost(device: str, ranks: int, seconds: float, every: int) -> tuple[int, float]:
    """Part 2b: samples/s with the membership check (a coordinator request and a control
    allreduce) every ``every`` steps instead of every step: what that check costs a step."""
    job = Job(device, ranks, {"epochs": 100_000, "batch_size": BATCH,
                              "precision": PRECISION[device]}, check_every=every)  # fmt: skip
    try:
        size = job.start_all_but_one(ranks)
        job.train_at(size, seconds)
        rates = [rate for n, rate in job.coordinator.take_measurements()[0] if n == size]
        job.coordinator.abort("benchmark finished")
    finally:
        job.close()
    return size, statistics.median(rates)


def abort_and_regroup(device: str) -> tuple[bool, str]:
    """Abort a one-rank group in this process, then form the next epoch's group on the same
    device: did the aborted group's next collective raise, and how long until the new group
    reduced a tensor (the part of a regroup after a lost peer that the backend owns)."""
    rendezvous = TorchRendezvousHost()
    coordinator = Coordinator(rendezvous, min_nodes=1, max_nodes=1, settle_s=1.0)
    coordinator.start()
    backend = TorchBackend(device="cuda:0" if device == "cuda" else "cpu")
    host, port = coordinator.address
    backend.attach_coordinator(host, port, coordinator.token)
    try:
        backend.init(0, rendezvous.prepare_epoch(1, 1), timeout_s=60)
        ones = torch.ones(4, device=backend.device)
        backend.allreduce_mean_([ones])
        began = time.perf_counter()
        backend.abort("bench: a peer of this epoch is lost")
        try:
            backend.allreduce_mean_([ones])
            raised = "did not raise"
        except Exception as error:  # the backend's error type is not part of its contract
            raised = f"raised {type(error).__name__}"
        backend.init(0, rendezvous.prepare_epoch(2, 1), timeout_s=60)
        twos = torch.full((4,), 2.0, device=backend.device)
        backend.allreduce_mean_([twos])
        if device == "cuda":
            torch.cuda.synchronize()
        took = time.perf_counter() - began
        reduced = bool(torch.all(twos == 2.0))
    finally:
        backend.shutdown()
        coordinator.close()
    # gloo's abort shuts the epoch's peer sockets: a one-rank group has none, so its next
    # collective runs; nccl's aborted communicator must refuse it.
    ok = reduced and (device != "cuda" or raised != "did not raise")
    return ok, f"aborted group's next collective {raised}; new group reduced in {took:.2f} s"


def correctness(device: str, ranks: int, epochs: int) -> tuple[bool, str]:
    """Part 3: a paced job trains to its end through a grow and a kill."""
    # Paced steps: a GPU would finish the digits in seconds, before the group could grow.
    job = Job(device, ranks, {"epochs": epochs, "batch_size": 8,
                              "precision": PRECISION[device], "step_delay_s": 0.2})  # fmt: skip
    results: list[tuple[Any, ...]] = []
    try:
        job.start_all_but_one(ranks)
        if ranks >= 2:
            t = time.time()
            job.start(ranks - 1)
            job.resumed(ranks, t)
            job.kill_last(ranks)
        while len(results) < sum(p.is_alive() or p.exitcode == 0 for p in job.procs.values()):
            results.append(job.queue.get(timeout=600))
    finally:
        job.close()
    sizes = [e["world_size"] for e in job.coordinator.epochs() if e["resumed_at"]]
    finished = [r for r in results if r[1] == "finished" and r[2] == 0]
    if not finished:
        return False, f"no rank 0 finished (group sizes {sizes}): {results}"
    accuracy = finished[0][3]["test_accuracy"]
    verdict = accuracy >= 0.5
    return verdict, f"group sizes {sizes}; test accuracy {accuracy:.3f} (needs >= 0.5)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--ranks", type=int, default=None,
                        help="rank processes (default: one per visible GPU; cpu: 2)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=8.0, help="measured per group size")
    parser.add_argument("--epochs", type=int, default=4, help="of the correctness job")
    parser.add_argument("--check-every", default="10",
                        help="check intervals (steps) to measure besides 1; '' none")  # fmt: skip
    args = parser.parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("no CUDA device: nothing to measure")
            return 2
        ranks = args.ranks or torch.cuda.device_count()
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        print(f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}; "
              f"nccl {nccl}; torch {torch.__version__}; {ranks} rank(s)")  # fmt: skip
        base_device = "cuda:0"
    else:
        ranks = args.ranks or 2
        print(f"cpu, gloo; torch {torch.__version__}; {ranks} rank(s); {os.cpu_count()} cores")
        base_device = "cpu"

    plain = baseline(base_device, args.seconds)
    print(f"baseline  plain loop on {base_device}: {plain:,.0f} samples/s (batch {BATCH})")
    figures = resizes(args.device, ranks, args.seconds)
    for size, rate in figures["samples_per_s"].items():
        ratio = rate / plain
        print(f"elastic   {size} rank(s): {rate:,.0f} samples/s  "
              f"({ratio:.2f}x the baseline; per rank {ratio / size:.2f}x)")  # fmt: skip
    if "grow_s" in figures:
        print(f"resize    grow {ranks - 1} -> {ranks}: {figures['grow_s']:.2f} s (join -> step)")
        print(f"resize    SIGKILL {ranks} -> {ranks - 1}: {figures['kill_s']:.2f} s (kill -> step)")
    else:
        print("resize    one rank: no resize inside the node to make (needs 2+ GPUs)")
    for every in [int(k) for k in args.check_every.split(",") if k]:
        size, rate = check_cost(args.device, ranks, args.seconds, every)
        print(f"check     {size} rank(s), membership check every {every} steps: "
              f"{rate:,.0f} samples/s ({rate / plain:.2f}x the baseline)")  # fmt: skip
    aborted, line = abort_and_regroup(args.device)
    print(f"abort     {'OK' if aborted else 'FAIL'}: {line}")
    ok, line = correctness(args.device, ranks, args.epochs)
    print(f"{'OK' if ok else 'FAIL'}: {line}")
    return 0 if ok and aborted else 1


if __name__ == "__main__":
    sys.exit(main())
