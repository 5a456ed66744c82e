"""``parsl-malleable --help`` and every ``parsl-malleable <sub> --help`` answer at once.

A user's first command is ``--help``; ``replay --help`` once took 7-15 s because its command
module imported the replay (numba, pandas, the solvers) at the top. The robust check is which
modules a ``--help`` imports (a fresh interpreter prints ``sys.modules``); the wall time of the
installed entry point is measured and printed, with a bound generous enough for a loaded
2-core machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parsl_malleable.cli import SUBCOMMANDS

HEAVY = ("torch", "parsl", "numba", "pandas", "pulp", "scipy", "sklearn", "optuna")
HELP_BOUND_S = 5.0  # < 1 s on an idle machine (measured: 0.2-0.4 s); headroom for a loaded one

_PROBE = """
import json, sys
from parsl_malleable.cli import main
try:
    main(sys.argv[1:], prog_name="parsl-malleable")
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""

# the top-level --help and each subcommand's
ARGVS = [
    pytest.param((), id="top"),
    *(pytest.param((name,), id=name) for name in sorted(SUBCOMMANDS)),
]


def _imported_by_help(*argv: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", ARGVS)
def test_help_imports_nothing_heavy(argv: tuple[str, ...]) -> None:
    imported = _imported_by_help(*argv)
    assert "click" in imported  # the probe did run the command line
    heavy = sorted(set(HEAVY) & imported)
    assert not heavy, f"parsl-malleable {' '.join(argv)} --help imports {heavy}"


@pytest.mark.parametrize("argv", ARGVS)
def test_help_through_the_entry_point_is_quick(argv: tuple[str, ...]) -> None:
    exe = shutil.which("parsl-malleable")
    if exe is None:
        pytest.skip("the parsl-malleable entry point is not installed")
    began = time.perf_counter()
    out = subprocess.run([exe, *argv, "--help"], capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - began
    print(f"parsl-malleable {' '.join(argv)} --help: {took:.2f} s")
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout
    assert took < HELP_BOUND_S, f"{' '.join(argv)} --help took {took:.1f} s"


def test_choices_spelled_out_for_help_match_the_code() -> None:
    from parsl_malleable.allocate import command as allocate_command
    from parsl_malleable.allocate.objectives import OBJECTIVES
    from parsl_malleable.allocate.options import MAX_NODES
    from parsl_malleable.replay import command as replay_command
    from parsl_malleable.replay.policies import POLICIES as REPLAY_POLICIES
    from parsl_malleable.replay.scenario import WORKLOADS
    from parsl_malleable.sim import command as sim_command
    from parsl_malleable.sim.engine import POLICIES
    from parsl_malleable.sim.trace_replay import END_CUTS
    from parsl_malleable.traces import command as trace_command
    from parsl_malleable.traces.read import ALIASES, READERS

    assert set(sim_command.POLICY_NAMES) == set(POLICIES)
    assert tuple(sim_command.END_CUT_NAMES) == tuple(END_CUTS)
    assert set(trace_command.FORMAT_NAMES) == {*READERS, *ALIASES}
    assert tuple(allocate_command.OBJECTIVE_NAMES) == tuple(OBJECTIVES)
    assert allocate_command.MAX_NODES == MAX_NODES
    assert tuple(replay_command.POLICY_NAMES) == tuple(REPLAY_POLICIES)
    assert tuple(replay_command.WORKLOADS) == tuple(WORKLOADS)


def test_the_readme_lists_every_subcommand() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Command line", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in sorted(SUBCOMMANDS) if f"`parsl-malleable {name}" not in section]
    assert not missing, f"README.md's Command line section does not list {missing}"
