"""Loading the planner before the first poll of a PBS provider loads the masked kernel too (the
one a snapshot runs once a queued job has ``allowed_nodes``, which only the PBS adapter fills),
so its compile never falls inside a poll; a Slurm or emulated provider does not pay for it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from parsl_malleable.harvest.warmup import tiny_machine

# A fresh process: this one may have compiled the kernels already (another test).
PROBE = """
import json, sys, tempfile
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.sim.engine import run_schedule
from parsl_malleable.sim.masked_engine import run_schedule_masked
from parsl_malleable.harvest.warmup import planner_cached
before = [len(run_schedule.signatures), len(run_schedule_masked.signatures)]
provider = BackfillProvider(sys.argv[1], script_dir=tempfile.mkdtemp(), autostart=False)
provider.load_planner()
after = [len(run_schedule.signatures), len(run_schedule_masked.signatures)]
print(json.dumps({"before": before, "after": after, "cached": planner_cached()}))
"""


def _load_planner_in_a_fresh_process(profile: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, profile],
        capture_output=True,
        text=True,
        timeout=300,  # a cold numba cache compiles both kernels (about a minute on 2 cores)
    )
    assert out.returncode == 0, out.stderr
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == [0, 0]
    return got


def test_loading_a_pbs_providers_planner_compiles_the_masked_kernel_too() -> None:
    got = _load_planner_in_a_fresh_process("example-pbs")
    assert got["after"][0] >= 1 and got["after"][1] >= 1
    assert got["cached"] is True  # both kernels are in numba's cache now


def test_a_slurm_providers_planner_leaves_the_masked_kernel_alone() -> None:
    got = _load_planner_in_a_fresh_process("slurm-test")
    assert got["after"][0] >= 1 and got["after"][1] == 0


def test_the_restricted_tiny_machine_restricts_its_queued_job() -> None:
    plain, masked = tiny_machine(), tiny_machine(restricted=True)
    assert plain.pending[0].allowed_nodes is None
    usable = {n.name for n in masked.nodes}
    allowed = masked.pending[0].allowed_nodes
    assert allowed is not None and allowed < usable  # a real restriction: the masked kernel
