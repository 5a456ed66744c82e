"""More nodes than any machine has are refused at once, by the command and by ``allocate``.

``parsl-malleable allocate --nodes 100000000`` used to build 10^8 node names (3.5 GB) and never
answer; the limit is ``options.MAX_NODES`` (ten times the largest machines).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.allocate import AllocationInputError, allocate, instances
from parsl_malleable.allocate import command as allocate_command
from parsl_malleable.allocate.options import MAX_NODES

from .helpers import linear_job


class _Huge(Sequence[str]):
    """``size`` node names that are never built: reading more than a few means no early check."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.reads = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):  # type: ignore[override]
        self.reads += 1
        if self.reads > 1000:
            raise AssertionError("the node list is being read one by one")
        return f"n{i}"


def test_command_refuses_10_to_the_8_nodes_without_building_them(
    bftrainer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_instance(*args, **kwargs):
        raise AssertionError("make_instance was called: node names would be built")

    monkeypatch.setattr(instances, "make_instance", no_instance)
    began = time.perf_counter()
    result = CliRunner().invoke(
        allocate_command.allocate,
        ["--workload-dir", str(bftrainer_dir), "--nodes", "100000000"],
    )
    assert result.exit_code != 0
    assert time.perf_counter() - began < 10.0
    assert "--nodes" in result.output
    assert f"{MAX_NODES}" in result.output.replace(",", "")  # the message names the limit


def test_command_accepts_the_limit_itself(bftrainer_dir: Path, monkeypatch) -> None:
    # Not refused at MAX_NODES: stop right after the check instead of building 10^6 nodes.
    def stop(*args, **kwargs):
        raise SystemExit(7)

    monkeypatch.setattr(instances, "make_instance", stop)
    result = CliRunner().invoke(
        allocate_command.allocate,
        ["--workload-dir", str(bftrainer_dir), "--nodes", str(MAX_NODES)],
    )
    assert result.exit_code == 7, result.output


def test_allocate_refuses_more_nodes_than_the_limit_before_reading_them() -> None:
    free = _Huge(10**8)
    with pytest.raises(AllocationInputError, match=f"{MAX_NODES:,}"):
        allocate([linear_job("a", 1.0)], free, solver="greedy")
    assert free.reads == 0


def test_held_nodes_count_towards_the_limit() -> None:
    job = linear_job("a", 1.0, current=("h0", "h1", "h2"))
    free = _Huge(MAX_NODES - 2)  # with the 3 held: one node too many
    with pytest.raises(AllocationInputError, match="3 held"):
        allocate([job], free, solver="greedy")
    assert free.reads == 0
