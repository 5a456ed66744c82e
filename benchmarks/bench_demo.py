"""The README's main job, timed: configs/demo.yaml on the emulated site, against the same
campaign on the same emulated machine with no native load (dedicated nodes) in the same run.

Both runs are the real command (``parsl-malleable run``) in a subprocess: real HTEX worker pools
on six virtual nodes, real digits training. The baseline keeps every setting and changes only
the native workload (offered load 0.001, so no native job runs in the time it takes), which is
what the campaign would get if the machine were its own. Printed per run: wall time of the
command, time to result of the whole campaign (its last job's end), the lowest test accuracy,
node-hours held by the jobs, rescales, blocks yielded and reclaimed, the harvest fraction
(harvested / (harvested + idle) node-seconds), the training fraction (node-seconds in the ranks'
training steps / harvested node-seconds, from the campaign's site samples) and, beside it, the
share of harvested node-seconds given to jobs (ranks held, starting ones included: what the
training fraction counted before it counted steps); then the median seconds of each start-up
phase of the nodes that reached a first step (the run's ``startup.csv``).

    python benchmarks/bench_demo.py [--campaign configs/demo.yaml]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]


def run(campaign: Path, output: Path) -> dict[str, float]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    began = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "parsl_malleable",
            "run",
            str(campaign),
            "-o",
            str(output),
            "--quiet",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{campaign} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    table = pd.read_csv(output / "results.csv")
    log = (output / "campaign.log").read_text()
    from parsl_malleable.campaign.results import node_time, startup_medians
    from parsl_malleable.campaign.store import CampaignStore

    store = CampaignStore(output, read_only=True)
    try:
        spent = node_time(store)
        startups = startup_medians(store.node_startups())
        missed = store.meta("run1_reclaims_missed") or store.meta("run1_reclaims")
        unforeseeable = store.meta("run1_reclaims_unforeseeable")
    finally:
        store.close()
    fraction, training, assigned = (
        spent.harvest_fraction,
        spent.training_fraction,
        spent.assigned_fraction,
    )
    medians = {phase: value[0] if value else float("nan") for phase, value in startups.items()}
    return {
        "wall_s": wall,
        "time_to_result_s": float(table["time_to_result_s"].max()),
        "min_accuracy": float(table["result.test_accuracy"].min()),
        "jobs_done": int((table["status"] == "done").sum()),
        "node_hours": float(table["node_hours"].sum()),
        "rescales": int(table["rescales"].sum()),
        "yields": log.count(" yields: a queued job"),
        "missed": int(missed) if missed else 0,
        "unforeseeable": int(unforeseeable) if unforeseeable else 0,
        "harvest_fraction": fraction if fraction is not None else float("nan"),
        "training_fraction": training if training is not None else float("nan"),
        "assigned_fraction": assigned if assigned is not None else float("nan"),
        "startup_nodes": len(pd.read_csv(output / "startup.csv")),
        **{f"startup_{phase}": value for phase, value in medians.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", type=Path, default=REPO / "configs" / "demo.yaml")
    args = parser.parse_args()
    data = yaml.safe_load(args.campaign.read_text())
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        folder = Path(tmp)
        data["python_path"] = [str(REPO)]
        harvest = folder / "harvest.yaml"
        harvest.write_text(yaml.safe_dump(data))
        dedicated_data = dict(data)
        overrides = dict(data.get("site_overrides") or {})
        overrides["emulated"] = {**overrides.get("emulated", {}), "load": 0.001, "start_s": 0}
        dedicated_data["site_overrides"] = overrides
        dedicated = folder / "dedicated.yaml"
        dedicated.write_text(yaml.safe_dump(dedicated_data))
        results = {
            "harvested (the demo)": run(harvest, folder / "out-harvest"),
            "dedicated (no native load)": run(dedicated, folder / "out-dedicated"),
        }
    print(f"campaign {args.campaign.name}, {os.cpu_count()} cores")
    header = (
        f"{'run':28s} {'wall s':>7s} {'result s':>8s} {'min acc':>7s} {'jobs':>4s} "
        f"{'node-h':>6s} {'resc':>4s} {'yield':>5s} {'missed':>6s} {'unfor.':>6s} {'harvest':>7s} "
        f"{'steps':>6s} {'ranks':>6s}"
    )
    print(header)
    for name, r in results.items():
        print(
            f"{name:28s} {r['wall_s']:7.1f} {r['time_to_result_s']:8.1f} "
            f"{r['min_accuracy']:7.3f} {r['jobs_done']:4d} {r['node_hours']:6.3f} "
            f"{r['rescales']:4d} {r['yields']:5d} {r['missed']:6d} {r['unforeseeable']:6d} "
            f"{r['harvest_fraction']:7.0%} "
            f"{r['training_fraction']:6.1%} {r['assigned_fraction']:6.1%}"
        )
    print(
        "steps: node-seconds in training steps / harvested; ranks: node-seconds given to jobs "
        "(starting ranks included) / harvested; missed / unfor.: blocks the emulated site "
        "reclaimed for a native the provider's last poll could have foreseen / could not"
    )
    phases = [
        ("queued", "startup_queued_s"),
        ("worker start", "startup_worker_start_s"),
        ("rank start", "startup_rank_start_s"),
        ("first step", "startup_first_step_s"),
        ("idle->step", "startup_idle_to_first_step_s"),
    ]
    print("\nstart-up per node, median seconds (submitted -> running -> worker -> joined -> step)")
    print(f"{'run':28s} {'nodes':>5s} " + " ".join(f"{label:>12s}" for label, _ in phases))
    for name, r in results.items():
        cells = " ".join(f"{r[key]:12.2f}" for _, key in phases)
        print(f"{name:28s} {r['startup_nodes']:5d} {cells}")
    ratio = (
        results["dedicated (no native load)"]["time_to_result_s"]
        / results["harvested (the demo)"]["time_to_result_s"]
    )
    print(f"time to result, dedicated / harvested: {ratio:.2f}")


if __name__ == "__main__":
    main()
