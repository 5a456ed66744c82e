"""Rescale latency of the elastic runtime against a full stop-and-restart from disk.

Latency = membership change requested -> first training step completed at the new size, for
growing by one rank, a planned shrink (drain) and a SIGKILLed rank, with a ~1M-parameter MLP on
the digits data (CPU, gloo or Horovod). The baseline is what TorchElastic or AdaptDL do on every
change: stop all ranks (checkpoint to disk), start new processes, load the checkpoint. Ranks are
plain processes here, so the figures measure the runtime, not Parsl's block start-up.

    python benchmarks/bench_rescale.py [--backend torch|horovod] [--repeats N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from apps.digits import make_model  # noqa: E402
from parsl_malleable.elastic.backend_registry import get_rendezvous_host  # noqa: E402
from parsl_malleable.elastic.coordinator import Coordinator  # noqa: E402
from parsl_malleable.elastic.rank import RankSettings, RankSpec, run_rank  # noqa: E402

HIDDEN = (1024, 896)
TARGET_S = 2.0
TARGET_RATIO = 5.0
FREETRAIN = "Elastic Horovod on GPU nodes (FreeTrain): 17-19 s scale-up, 11-13 s scale-down"


def _rank(spec: RankSpec) -> None:
    from apps.digits import train_elastic

    run_rank(spec, train_elastic, (), {"epochs": 10_000, "hidden": HIDDEN, "lr": 0.005})


class Bench:
    def __init__(self, backend: str, checkpoint_dir: str) -> None:
        self.coordinator = Coordinator(
            get_rendezvous_host(backend), min_nodes=1, max_nodes=8, settle_s=0.5
        )
        self.coordinator.start()
        host, port = self.coordinator.address
        self.settings = RankSettings(
            backend=backend,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=0,
            collective_timeout_s=20,
        )
        self.host, self.port = host, port
        self.ctx = mp.get_context("spawn")
        self.procs: list[Any] = []

    def start(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            spec = RankSpec(self.host, self.port, self.coordinator.token, self.settings)
            proc = self.ctx.Process(target=_rank, args=(spec,), daemon=True)
            proc.start()
            self.procs.append(proc)
            ids.append(spec.member_id)
        return ids

    def wait(self, size: int, after: float, timeout_s: float = 120.0) -> float:
        """Time the first group of ``size`` formed after ``after`` completed a step."""

        def resumed() -> float | None:
            for e in self.coordinator.epochs():
                if e["world_size"] == size and e["formed_at"] >= after and e["resumed_at"]:
                    return e["resumed_at"]
            return None

        if not self.coordinator.wait_for(lambda c: resumed() is not None, timeout_s):
            raise RuntimeError(f"no group of {size} resumed; epochs {self.coordinator.epochs()}")
        time.sleep(0.3)  # let it train a few steps before the next change
        stamp = resumed()
        assert stamp is not None
        return stamp

    def joined_at(self, member_id: str) -> float:
        for e in self.coordinator.events():
            if e["event"] == "joined" and e["member"] == member_id:
                return e["time"]
        raise RuntimeError(f"{member_id} never joined")

    def close(self) -> None:
        self.coordinator.abort("benchmark finished")
        time.sleep(1.0)
        self.coordinator.close()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def measure(backend: str, repeats: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"grow": [], "shrink": [], "kill": [], "restart": []}
    with tempfile.TemporaryDirectory() as ckpt:
        bench = Bench(backend, ckpt)
        try:
            t = time.time()
            bench.start(2)
            bench.wait(2, t)
            for _ in range(repeats):
                # Grow 2 -> 3: from the newcomer asking to join (it has started and built its
                # model: that part is the same for any runtime) to a step done by 3 ranks.
                (new,) = bench.start(1)
                bench.coordinator.wait_for(lambda c, m=new: _has_joined(c, m), 120)
                figures["grow"].append(bench.wait(3, bench.joined_at(new)) - bench.joined_at(new))
                # Planned shrink 3 -> 2.
                t = time.time()
                bench.coordinator.drain(
                    member_ids=[bench.coordinator.current_members()[-1].member_id]
                )
                figures["shrink"].append(bench.wait(2, t) - t)
                # Kill 3 -> 2 (grow first, untimed).
                t = time.time()
                bench.start(1)
                bench.wait(3, t)
                victim = bench.coordinator.current_members()[-1]
                t = time.time()
                os.kill(victim.pid, signal.SIGKILL)
                figures["kill"].append(bench.wait(2, t) - t)
            for _ in range(repeats):
                # Stop-and-restart: drain everyone (the last leaver saves), start 2 new processes.
                t = time.time()
                bench.coordinator.drain(
                    member_ids=[m.member_id for m in bench.coordinator.current_members()]
                )
                bench.coordinator.wait_for(
                    lambda c: (
                        c.running_world_size() == 0
                        and all(m.gone or not m.alive for m in c.members())
                    ),
                    60,
                )
                bench.start(2)
                figures["restart"].append(bench.wait(2, t) - t)
        finally:
            bench.close()
    return figures


def _has_joined(c: Coordinator, member_id: str) -> bool:
    return any(e["event"] == "joined" and e["member"] == member_id for e in c.events())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch", choices=["torch", "horovod"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    params = sum(p.numel() for p in make_model(HIDDEN).parameters())
    print(f"backend={args.backend} model=MLP{HIDDEN} params={params:,} cpus={os.cpu_count()}")
    figures = measure(args.backend, args.repeats)
    restart = statistics.median(figures["restart"])
    ok = True
    for kind in ("grow", "shrink", "kill"):
        median = statistics.median(figures[kind])
        ratio = restart / median
        verdict = median < TARGET_S and ratio >= TARGET_RATIO
        ok &= verdict
        runs = ", ".join(f"{v:.3f}" for v in figures[kind])
        print(
            f"{kind:8s} median {median:6.3f} s  runs [{runs}]  restart/this {ratio:5.1f}x  "
            f"{'OK' if verdict else 'MISS'} (target < {TARGET_S} s and >= {TARGET_RATIO}x)"
        )
    runs = ", ".join(f"{v:.3f}" for v in figures["restart"])
    print(f"restart  median {restart:6.3f} s  runs [{runs}]  (stop all, save, new processes, load)")
    print(f"reference: {FREETRAIN}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
