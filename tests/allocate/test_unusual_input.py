"""Issue 16, allocator and profiler: bad numbers are refused by name, odd answers are explained."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.allocate import NodeWindow, ScalingCurve, TrainingJob, allocate
from parsl_malleable.allocate.api import _below
from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.allocate.workload import load_workload
from parsl_malleable.cli import main
from parsl_malleable.errors import TraceFormatError
from parsl_malleable.profile.profiler import ProfileInputError, ScalabilityProfiler

from .helpers import AT_LEISURE_S

NAN, INF = float("nan"), float("inf")
LINEAR = ScalingCurve((1, 2, 4), (10.0, 20.0, 40.0))


def job(name: str = "a", curve: ScalingCurve = LINEAR, **kw) -> TrainingJob:
    args = {"min_nodes": 1, "max_nodes": 4, "scale_up_cost": 10.0, "scale_down_cost": 5.0}
    return TrainingJob(name, curve=curve, **{**args, **kw})


NODES = ["n1", "n2", "n3", "n4"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"default_window_s": INF, "max_horizon_s": INF}, "default_window_s=inf"),
        ({"max_horizon_s": NAN}, "max_horizon_s=nan"),
        ({"time_limit": NAN}, "time_limit=nan"),
        ({"time_limit": 0}, "time_limit=0"),
        ({"gap_rel": -1}, "gap_rel=-1"),
        ({"max_classes": 1.5}, "max_classes=1.5"),
        ({"node_cap": NAN}, "node_cap=nan"),
    ],
)
def test_bad_numeric_options_are_refused_by_name(options, field):
    with pytest.raises(AllocationInputError, match=field.replace("=", "=").replace(".", r"\.")):
        allocate([job()], NODES, **options)


def test_a_string_of_free_nodes_is_not_three_nodes():
    with pytest.raises(AllocationInputError, match="free_nodes='abc'"):
        allocate([job()], "abc")
    with pytest.raises(AllocationInputError, match=r"free_nodes\.1=7"):
        allocate([job()], ["n1", 7])


@pytest.mark.parametrize("value", [1.5, NAN, True])
def test_fractional_or_nan_node_counts_are_refused_not_truncated(value):
    with pytest.raises(AllocationInputError, match=r"min_nodes=(1.5|nan|True): "):
        job(min_nodes=value)
    with pytest.raises(AllocationInputError, match=r"nodes\.0=(1.5|nan|True): "):
        ScalingCurve((value, 4), (1.0, 2.0))


def test_whole_floats_are_still_counts():
    assert job(min_nodes=2.0).min_nodes == 2 and isinstance(job(min_nodes=2.0).min_nodes, int)


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_zero_throughput_job_gets_no_nodes_and_is_named(solver):
    zero = ScalingCurve((2, 4), (0.0, 0.0))
    idle = job("idle", zero, min_nodes=2, current_nodes=("n1", "n2"))
    result = allocate(
        [idle, job("busy", max_nodes=1)], ["n3", "n4"], solver=solver, time_limit=AT_LEISURE_S
    )
    assert result.nodes == {"idle": 0, "busy": 1}
    assert set(result.released["idle"]) == {"n1", "n2"}
    assert "zero throughput at every size, given 0 nodes: idle" in result.message
    assert math.isfinite(result.objective) and result.status == "optimal"


def test_solver_value_equal_to_greedy_within_rounding_is_kept():
    assert not _below(1.0, 1.0 + 5e-9)  # CBC's optimum vs the same greedy value
    assert not _below(1234.5, 1234.5 * (1 + 5e-7))
    assert _below(1.0, 1.01)


def test_finite_windows_give_a_finite_objective():
    result = allocate([job()], NODES, [NodeWindow(tuple(NODES), 600.0)])
    assert math.isfinite(result.objective) and result.horizon_s == 600.0
    with pytest.raises(AllocationInputError, match="remaining_s=inf: Input should be a finite"):
        NodeWindow(("n1",), INF)


def workload(tmp_path: Path, jmin: str = "1") -> Path:
    (tmp_path / "w-jobs.csv").write_text(f"job,Tcup,Tcdw,Jmin,Jmax\nA,10,5,{jmin},4\nB,10,5,1,4\n")
    scaling = "job,nodes,throughput\n" + "".join(
        f"{j},{n},{10 * n}\n" for j in "AB" for n in (1, 2, 4)
    )
    (tmp_path / "w-scaling.csv").write_text(scaling)
    return tmp_path


def test_workload_with_fractional_node_count_names_its_line(tmp_path):
    with pytest.raises(TraceFormatError, match=r"w-jobs.csv:2: .*min_nodes must be a whole number"):
        load_workload(workload(tmp_path, "1.5"), "w")
    (tmp_path / "w-scaling.csv").write_text("job,nodes,throughput\nA,2.5,10\n")
    with pytest.raises(
        TraceFormatError, match=r"w-scaling.csv:2: bad number: nodes must be a whole"
    ):
        load_workload(tmp_path, "w")


def allocate_cli(tmp_path: Path, *extra: str):
    args = ["allocate", "--workload-dir", str(workload(tmp_path)), "--workload", "w"]
    return CliRunner().invoke(main, [*args, "--nodes", "6", *extra])


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_cli_time_limit_must_be_finite_and_positive(tmp_path, value):
    result = allocate_cli(tmp_path, "--time-limit", value)
    assert result.exit_code == 2 and "--time-limit" in result.output


@pytest.mark.parametrize("zipped", [False, True])
def test_cli_idle_intervals_plain_or_gzipped_whatever_the_name(tmp_path, zipped):
    text = "node,idle_start,idle_end\n" + "".join(f"n{i},0,{600 * (i + 1)}\n" for i in range(5))
    path = tmp_path / "idle.csv"
    path.write_bytes(gzip.compress(text.encode()) if zipped else text.encode())
    result = allocate_cli(tmp_path, "--idle-intervals", str(path), "--solver", "greedy")
    assert result.exit_code == 0, result.output
    assert "blocks to request" in result.output


def test_cli_idle_intervals_without_any_interval_is_an_error(tmp_path):
    path = tmp_path / "idle.csv"
    path.write_text("node,idle_start,idle_end\n")
    result = allocate_cli(tmp_path, "--idle-intervals", str(path))
    assert result.exit_code == 1 and "no idle interval longer than 0 s" in result.output


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"default_scale_up_s": -5.0}, "default_scale_up_s must be >= 0"),
        ({"default_scale_down_s": NAN}, "default_scale_down_s must be a finite number"),
        ({"extrapolation_rel": NAN}, "extrapolation_rel must be a finite number"),
        ({"noise_floor": 1.0}, "noise_floor must be < 1"),
    ],
)
def test_profiler_refuses_negative_or_nan_settings(kwargs, match):
    with pytest.raises(ProfileInputError, match=match):
        ScalabilityProfiler(**kwargs)


def test_profiler_refuses_bad_measurements_by_name():
    profiler = ScalabilityProfiler()
    with pytest.raises(ProfileInputError, match="rescale seconds must be >= 0"):
        profiler.record_rescale("a", "up", -1.0)
    with pytest.raises(ProfileInputError, match="world_size must be a whole number"):
        profiler.record("a", 1.5, 10.0)
    profiler.record("a", 1, 10.0)
    with pytest.raises(ProfileInputError, match="horizon_s must be a finite number"):
        profiler.suggest_exploration("a", 1, horizon_s=NAN)
