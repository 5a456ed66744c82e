"""Faults as real nodes have them, measured on the cluster of real hosts, with default settings.

    sudo python benchmarks/bench_faults.py [--faults frozen-rank1,...] [--out faults.json]

Each fault runs one job: three ranks (``tests/elastic/ddp_rank.py``: digits with DDP and a
DataLoader, every sample counted), one per host of ``scripts/host-cluster`` (started here when
none runs), around a coordinator on the driver's address, with the runtime's defaults
(``heartbeat_interval_s`` 1, ``heartbeat_timeout_s`` 10, ``collective_timeout_s`` 30). After 10
steps at world 3 the fault is made; printed per fault:

- **to next step**: seconds from the fault to the first step of the group without the faulty
  rank (the target: the heartbeat timeout plus one regroup, about 10-12 s);
- **committed steps lost**: the last step the old group committed minus the step the new one
  started from (0 is right); **every sample once**: each sample trained exactly once in every
  epoch, counted by the ranks across the fault (yes is right);
- **faulty rank**: how it ended and how long after the fault was undone (SIGCONT, the link
  back up), or after the run's end for a rank never resumed (its job cancelled: Slurm sends
  SIGCONT, SIGTERM, and SIGKILL after KillWait);
- **left running**: processes of the run still alive 60 s after its end (0 is right).

Faults: ``frozen-rank1`` and ``frozen-rank0`` (SIGSTOP 20 s then SIGCONT; rank 0 writes the
checkpoints), ``frozen-forever`` (never resumed), ``cut-off`` (the host's link down 20 s, then
up), ``slow-link`` (tbf 2 Mbit/s each way, 300 ms queue, for 20 steps: nothing must change).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from parsl_malleable.elastic.coordinator import Coordinator  # noqa: E402
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost  # noqa: E402


def _load(relative: str) -> ModuleType:
    """A helper module of the test suite, by path: ``tests`` is also the name of another
    distribution's package (globus-compute-endpoint's), which an import by name would find."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


host_cluster = _load("tests/host_cluster.py")
Ranks = _load("tests/elastic/rank_procs.py").Ranks

FAULTS = ["frozen-rank1", "frozen-rank0", "frozen-forever", "cut-off", "slow-link"]
EPOCHS = 4
FAULT_S = 20.0  # how long a frozen rank stays stopped, or a host cut off
LEFT_AFTER_S = 60.0


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_pids(tag: str) -> list[int]:
    """Processes whose environment carries this run's job name (srun sets SLURM_JOB_NAME)."""
    needle = f"SLURM_JOB_NAME={tag}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return [p for p in found if pid_alive(p)]


def wait_for(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def measure(fault: str, cluster: Any, workdir: Path) -> dict[str, Any]:
    cluster.tag = f"pmfault-{fault}-{os.getpid()}"
    coordinator = Coordinator(
        TorchRendezvousHost(cluster.driver_address), min_nodes=1, max_nodes=3,
        host=cluster.driver_address,
    )  # fmt: skip
    coordinator.start()
    pace = workdir / f"pace-{fault}"
    pace.touch()
    settings = {"torch_threads": 1, "checkpoint_dir": str(workdir / f"ckpt-{fault}")}
    args = {"epochs": EPOCHS, "batch_size": 32, "lr": 0.02, "seed": 0,
            "pace_file": str(pace), "step_delay_s": 0.05}  # fmt: skip
    names = sorted(cluster.hosts)
    ranks = Ranks(coordinator, args, settings, where=lambda i, argv: cluster.on(names[i], argv))
    figures: dict[str, Any] = {"fault": fault}
    try:
        ranks.start(3)
        if not wait_for(lambda: coordinator.resumed_at(3, 10), 180):
            raise SystemExit(f"{fault}: no group of 3 trained 10 steps: {coordinator.epochs()}")
        members = coordinator.current_members()
        victim = members[0] if fault == "frozen-rank0" else members[1]
        before = coordinator.epochs()[-1]["epoch"]
        start_step = coordinator.last_step()
        at = time.time()
        if fault.startswith("frozen"):
            os.kill(victim.pid, signal.SIGSTOP)
        elif fault == "cut-off":
            cluster.cut(victim.host)
        else:
            cluster.slow(victim.host, rate="2mbit", latency="300ms")

        if fault == "slow-link":
            wait_for(lambda: coordinator.last_step() >= start_step + 20, 300)
            cluster.unslow(victim.host)
            figures["slow_steps_s"] = round(time.time() - at, 1)
        else:
            regrouped = wait_for(lambda: coordinator.resumed_at(2, 0), 120)
            new = next(
                (e for e in coordinator.epochs() if e["epoch"] > before and e["resumed_at"]), None
            )
            figures["to_next_step_s"] = (
                round(new["resumed_at"] - at, 1) if regrouped and new else None
            )
            old = next(e for e in coordinator.epochs() if e["epoch"] == before)
            if new is not None:
                figures["committed_lost"] = max(0, (old["last_step"] or 0) - new["start_step"])
            wait_for(lambda: time.time() >= at + FAULT_S, FAULT_S + 1)  # the fault lasts this
            if fault != "frozen-forever":
                undone = time.time()
                if fault == "cut-off":
                    cluster.heal(victim.host)
                else:
                    os.kill(victim.pid, signal.SIGCONT)
                outcome = ranks.outcome(victim.member_id, timeout_s=180)
                figures["faulty_rank"] = f"{outcome['status']} {time.time() - undone:.1f} s after"
        pace.unlink()
        survivors = [m.member_id for m in members if m.member_id != victim.member_id]
        if fault == "slow-link":
            survivors = [m.member_id for m in members]
        outcomes = [ranks.outcome(name, timeout_s=300) for name in survivors]
        value = next((o["value"] for o in outcomes if o["value"]), None)
        figures["finished"] = all(o["status"] == "finished" for o in outcomes)
        if value is not None:  # every sample exactly once in every epoch
            figures["seen_once"] = value["seen_min"] == value["seen_max"] == [1.0] * EPOCHS
        events = coordinator.events()
        figures["evictions"] = sum(e["event"] in ("lost", "evicted") for e in events)
        figures["warnings"] = coordinator.warnings()
        ended = time.time()
        cluster.cancel_all()  # the run's end: its jobs cancelled
        if fault == "frozen-forever":
            gone = wait_for(lambda: not pid_alive(victim.pid), LEFT_AFTER_S)
            figures["faulty_rank"] = (
                f"killed {time.time() - ended:.1f} s after the run's end" if gone else "still alive"
            )
        wait_for(lambda: not run_pids(cluster.tag), LEFT_AFTER_S)
        figures["left_running"] = len(run_pids(cluster.tag))
    finally:
        ranks.close()
        coordinator.close()
        cluster.cancel_all()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    status = subprocess.run([str(host_cluster.SCRIPT), "status"], capture_output=True)
    started = status.returncode != 0
    if started:
        subprocess.run([str(host_cluster.SCRIPT), "start"], check=True, timeout=180)
    results = []
    try:
        cluster = host_cluster.read()
        with tempfile.TemporaryDirectory() as tmp:
            for fault in args.faults.split(","):
                figures = measure(fault, cluster, Path(tmp))
                results.append(figures)
                print(json.dumps(figures), flush=True)
    finally:
        if started:
            subprocess.run([str(host_cluster.SCRIPT), "stop"], capture_output=True, timeout=60)
    print("\n| fault | to next step | committed steps lost | every sample once | "
          "faulty rank | evictions | left running 60 s after the end |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for f in results:
        print(f"| {f['fault']} | {f.get('to_next_step_s', '-')} s | {f.get('committed_lost', 0)} | "
              f"{'yes' if f.get('seen_once') else 'NO'} | {f.get('faulty_rank', '-')} | "
              f"{f['evictions']} | "
              f"{f['left_running']} |")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
