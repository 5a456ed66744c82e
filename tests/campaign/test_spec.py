"""Campaign files: every kind of mistake is caught before anything starts, with its path; a job
larger than its site is one of them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.runner import CampaignRunner, site_profile
from parsl_malleable.campaign.spec import (
    MAX_CAMPAIGN_JOBS,
    check_site_fits,
    load_campaign,
    parse_campaign,
    site_capacity,
)
from parsl_malleable.cli import main
from parsl_malleable.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
APP = "apps.digits:train_elastic"


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"python_path": [str(REPO)], **data}))
    return path


def job(**changes: object) -> dict:
    return {"name": "a", "app": APP, "epochs": 2, **changes}


def error_of(tmp_path: Path, data: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        load_campaign(write(tmp_path, data))
    return str(caught.value)


def test_the_demo_campaign_is_valid() -> None:
    campaign = load_campaign(REPO / "configs" / "demo.yaml")
    names = [j.name for j, _ in campaign.expanded()]
    assert len(names) >= 4 and len(set(names)) == len(names)
    assert site_profile(campaign).scheduler == "emulated"


def test_unknown_key_names_its_path_and_the_allowed_keys(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {"jobs": [job(max_node=2)]})
    assert "jobs[0].max_node: unknown key" in msg
    assert "max_nodes" in msg and "min_nodes" in msg  # the allowed keys are listed
    msg = error_of(tmp_path, {"jobs": [job()], "polcy": {}})
    assert "polcy: unknown key" in msg and "policy" in msg


def test_wrong_type_and_disallowed_values(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {"jobs": [job(max_nodes="many")]})
    assert "jobs[0].max_nodes" in msg and "integer" in msg
    msg = error_of(tmp_path, {"jobs": [job()], "policy": {"solver": "gurobi"}})
    assert "policy.solver" in msg and "'highs'" in msg and "'cbc'" in msg
    msg = error_of(tmp_path, {"jobs": [job(backend="mpi")]})
    assert "jobs[0].backend" in msg and "'torch'" in msg


def test_min_nodes_above_max_nodes(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {"jobs": [job(min_nodes=3, max_nodes=2)]})
    assert "jobs[0]: min_nodes (3) > max_nodes (2)" in msg


def test_unknown_app_module_function_and_argument(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {"jobs": [job(app="apps.nothere:train")]})
    assert "jobs[0].app: cannot import 'apps.nothere'" in msg
    msg = error_of(tmp_path, {"jobs": [job(app="apps.digits:trian")]})
    assert "jobs[0].app: module 'apps.digits' has no 'trian'" in msg
    msg = error_of(tmp_path, {"jobs": [job(app="apps.digits")]})
    assert "module:function" in msg
    msg = error_of(tmp_path, {"jobs": [job(args={"lrate": 0.1})]})
    assert "jobs[0].args (a)" in msg and "lrate" in msg


def test_sweeps_need_exactly_one_kind_and_unique_names(tmp_path: Path) -> None:
    sweep = {"name": "s", "app": APP, "grid": {"lr": [0.1]}, "architectures": [{}]}
    msg = error_of(tmp_path, {"sweeps": [sweep]})
    assert "sweeps[0]" in msg and "exactly one of grid, random, architectures" in msg
    msg = error_of(
        tmp_path,
        {"jobs": [job(name="s-0")], "sweeps": [{"name": "s", "app": APP, "grid": {"lr": [0.1]}}]},
    )
    assert "'s-0' is used twice" in msg
    assert "at least one entry" in error_of(tmp_path, {})


def test_site_and_its_overrides_are_checked(tmp_path: Path) -> None:
    campaign = parse_campaign({"site": "no-such-site", "jobs": [job()]})
    with pytest.raises(ConfigError, match=r"site: .*no-such-site"):
        site_profile(campaign)
    campaign = parse_campaign(
        {"site": "local-slurm", "jobs": [job()], "site_overrides": {"poll_interval": 3}}
    )
    with pytest.raises(ConfigError, match="poll_interval: unknown key"):
        site_profile(campaign)
    campaign = parse_campaign(
        {
            "site": "local-slurm",
            "jobs": [job()],
            "site_overrides": {"poll_interval_s": 3, "yield_grace_s": 1},
        }
    )
    assert site_profile(campaign).poll_interval_s == 3


def test_grid_random_and_nas_sweeps_expand() -> None:
    campaign = parse_campaign(
        {
            "sweeps": [
                {
                    "name": "g",
                    "app": APP,
                    "args": {"seed": 1},
                    "grid": {"lr": [0.1, 0.2], "batch_size": [16, 32, 64]},
                },
                {
                    "name": "r",
                    "app": APP,
                    "random": {
                        "trials": 5,
                        "seed": 3,
                        "params": {
                            "lr": {"low": 1e-3, "high": 1e-1, "log": True},
                            "hidden": {"choices": [[64], [128]]},
                        },
                    },
                },
                {
                    "name": "nas",
                    "app": APP,
                    "architectures": [{"hidden": [64]}, {"hidden": [64, 64]}],
                },
            ]
        }
    )
    jobs = campaign.expanded()
    grid = [(j, p) for j, p in jobs if j.name.startswith("g-")]
    assert len(grid) == 6
    assert {(p["lr"], p["batch_size"]) for _, p in grid} == {
        (lr, b) for lr in (0.1, 0.2) for b in (16, 32, 64)
    }
    assert all(j.args["seed"] == 1 for j, _ in grid)
    rand = [p for j, p in jobs if j.name.startswith("r-")]
    assert len(rand) == 5 and all(1e-3 <= p["lr"] <= 1e-1 for p in rand)
    assert len({p["lr"] for p in rand}) == 5
    again = parse_campaign(campaign.model_dump()).expanded()
    assert [p for j, p in again if j.name.startswith("r-")] == rand  # same seed, same draws
    assert [j.args["hidden"] for j, _ in jobs if j.name.startswith("nas-")] == [[64], [64, 64]]


def test_the_command_refuses_a_bad_campaign_before_starting(tmp_path: Path) -> None:
    path = write(tmp_path, {"jobs": [job(min_nodes=2, max_nodes=1)], "output": str(tmp_path / "o")})
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 1
    assert "min_nodes (2) > max_nodes (1)" in result.output
    assert not (tmp_path / "o").exists()


def test_a_job_larger_than_the_site_is_refused_before_starting(tmp_path: Path) -> None:
    # time_limit_s keeps a run that should have been refused short (the job would wait).
    data = {
        "jobs": [job(min_nodes=2, max_nodes=2), job(name="big", min_nodes=8, max_nodes=8)],
        "time_limit_s": 5,
        "output": str(tmp_path / "o"),
    }
    result = CliRunner().invoke(main, ["run", str(write(tmp_path, data))])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "jobs[1] (job big): min_nodes 8 is more than site 'emulated' can ever lend" in text
    assert "6 node(s) (its 6 virtual nodes)" in text
    assert "jobs[0]" not in text  # the job that fits is not reported
    assert not (tmp_path / "o").exists()


def test_the_site_size_comes_from_the_profile_and_its_overrides(tmp_path: Path) -> None:
    sweep = {"name": "s", "app": APP, "min_nodes": 4, "max_nodes": 4, "grid": {"lr": [0.1, 0.2]}}
    ok = parse_campaign({"site": "local-slurm", "sweeps": [sweep]})
    check_site_fits(ok, site_profile(ok))  # 6 harvested nodes at most: fits
    one_block = parse_campaign(
        {"site": "local-slurm", "site_overrides": {"max_blocks": 1}, "sweeps": [sweep]}
    )
    with pytest.raises(ConfigError) as caught:
        check_site_fits(one_block, site_profile(one_block), source="c.yaml")
    assert str(caught.value) == (
        "c.yaml: sweeps[0] (jobs s-0 .. s-1): min_nodes 4 is more than site 'local-slurm' can "
        "ever lend one job, 3 node(s) (its max_blocks x max_nodes_per_block: 1 x 3); lower "
        "min_nodes, or raise that limit (site_overrides) if the site has the nodes"
    )
    capped = parse_campaign(
        {"site": "emulated", "site_overrides": {"max_harvested_nodes": 3}, "sweeps": [sweep]}
    )
    assert site_capacity(site_profile(capped)) == (3, "its max_harvested_nodes: 3")
    # --site checks the job against the site it names, not the campaign's.
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump({**site_profile(ok).model_dump(), "max_harvested_nodes": 2}))
    path = write(tmp_path, {"jobs": [job(min_nodes=4, max_nodes=4)], "output": str(tmp_path / "o")})
    result = CliRunner().invoke(main, ["run", str(path), "--site", str(small)])
    assert result.exit_code == 1 and "min_nodes 4 is more than site 'local-slurm'" in result.output
    assert "2 node(s) (its max_harvested_nodes: 2)" in result.output


def test_a_job_larger_than_the_first_snapshot_fails_instead_of_waiting(tmp_path: Path) -> None:
    from concurrent.futures import Future

    from parsl_malleable.app import ElasticJobError
    from parsl_malleable.campaign.store import CampaignStore
    from parsl_malleable.elastic.metric_book import MetricBook, MetricChanges
    from parsl_malleable.snapshot import Node, NodeState, Snapshot

    class Job:  # what the runner reads of an ElasticJob
        def __init__(self) -> None:
            self.future: Future[object] = Future()
            self.warnings: list[str] = []

        @property
        def ended(self) -> bool:
            return self.future.done()

        def fail(self, message: str) -> None:
            self.future.set_exception(ElasticJobError(message))

        def take_metrics(self) -> MetricChanges:
            return MetricBook().take()

        def metric_counts(self) -> dict[str, int]:
            return MetricBook().counts()

    # The profile lets 6 nodes be harvested; the partition the scheduler reports has 3.
    campaign = parse_campaign(
        {"site": "local-slurm", "jobs": [job(min_nodes=4, max_nodes=4), job(name="b")]}
    )
    runner = CampaignRunner(campaign, tmp_path, source="c.yaml")
    runner.store = CampaignStore(tmp_path)
    runner.store.sync_jobs((j.name, j.model_dump(), p) for j, p in campaign.expanded())
    runner.jobs = {"a": Job(), "b": Job()}
    assert runner.fail_jobs_larger_than_site(None) == []  # no snapshot yet: not known
    nodes = [Node(f"n{i}", NodeState.IDLE) for i in range(3)]
    assert runner.fail_jobs_larger_than_site(Snapshot(now=0.0, nodes=nodes)) == ["a"]
    assert runner.fail_jobs_larger_than_site(Snapshot(now=1.0, nodes=nodes[:1])) == []  # once
    runner._collect_ended()
    rows = {r.name: r for r in runner.store.jobs()}
    assert rows["a"].status == "failed" and rows["b"].status == "waiting"
    assert rows["a"].error is not None
    assert "job a: min_nodes 4 is more than the 3 node(s) site 'local-slurm' has" in rows["a"].error
    runner.store.close()


@pytest.mark.parametrize(
    ("grid", "count", "product"),
    [
        # 40 parameters of 4 values: a 1 kB file once took 3.1 GB and hung validate
        ({f"p{i}": [1, 2, 3, 4] for i in range(40)}, "1,208,925,819,614,629,174,706,176", None),
        # a plain million-point grid: `run --dry-run` ended in a MemoryError traceback
        ({f"p{i}": list(range(10)) for i in range(6)}, "1,000,000", "10 x 10 x 10 x 10 x 10 x 10"),
    ],
)
def test_a_grid_too_large_is_refused_from_its_size_without_expanding_it(
    tmp_path: Path, grid: dict, count: str, product: str | None
) -> None:
    path = write(tmp_path, {"sweeps": [{"name": "s", "app": APP, "grid": grid}]})
    what = product or "the product"
    expected = (
        f"Error: {path}: sweeps[0]: grid expands to {count} jobs ({what} of the value counts of "
        f"its {len(grid)} parameter(s)); a campaign runs at most 10,000 jobs: list fewer values, "
        "or use random or a search with a trials budget\n"
    )
    for command in (["validate"], ["run", "--dry-run"]):
        started = time.perf_counter()
        out = CliRunner().invoke(main, [*command, str(path)])
        assert time.perf_counter() - started < 2.0, command
        assert out.exit_code == 1 and isinstance(out.exception, SystemExit), out.output
        assert out.output == expected


def test_the_bound_counts_every_job_and_sweep_of_the_campaign(tmp_path: Path) -> None:
    sweeps = [
        {
            "name": "s",
            "app": APP,
            "epochs": 1,
            "grid": {"lr": [0.1 + i for i in range(100)], "seed": list(range(100))},
        },
        {
            "name": "t",
            "app": APP,
            "epochs": 1,
            "architectures": [{"hidden": [8 + i]} for i in range(5)],
        },
    ]
    assert error_of(tmp_path, {"jobs": [job()], "sweeps": sweeps}) == (
        f"{tmp_path / 'c.yaml'}: (campaign): jobs and sweeps expand to 10,006 jobs (jobs: 1, "
        "sweeps[0]: 10,000, sweeps[1]: 5); a campaign runs at most 10,000: split it into several "
        "campaigns"
    )
    assert MAX_CAMPAIGN_JOBS == 10_000
    campaign = parse_campaign({"sweeps": sweeps[:1]})  # at the bound: fine
    assert [s.size() for s in campaign.sweeps] == [10_000]
