"""A site profile's ``submit_options``: checked when the profile loads, given to every block's
submit and start test, written into the block script, and honoured by the real scheduler.

The live tests use the local Slurm cluster, whose nodes carry features (scripts/slurm-cluster:
n1-n3 ``cpu``, n4-n6 ``gpu``); the PBS test runs the stand-in PBS of ``fake_pbs``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from parsl_malleable.errors import ConfigError, StartRefused
from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.harvest.site_profile import SiteProfile, load_profile
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.command_scheduler import OPTIONS_MARK
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.slurm import SlurmScheduler
from tests.schedulers.conftest import SlurmCluster, slurm_jobs  # noqa: F401

from .conftest import run_slurm, wait_for
from .fake_pbs import FakePBS

# What scripts/slurm-cluster gives the default six nodes.
FEATURES = {"n1": "cpu", "n2": "cpu", "n3": "cpu", "n4": "gpu", "n5": "gpu", "n6": "gpu"}
GPU_NODES = {n for n, f in FEATURES.items() if f == "gpu"}


def _slurm(**changes: object) -> SiteProfile:
    return load_profile("slurm-test").with_overrides(**changes)


# ------------------------------------------------------------------ checked when loaded


def test_options_are_kept_one_per_item_in_directive_form() -> None:
    profile = _slurm(
        submit_options=["--constraint=gpu&hbm80g", "--gpus-per-node=4", "-C  gpu", "-L scratch"]
    )
    # Whitespace inside an item is normalised: each is one option and at most one value.
    assert profile.submit_options == (
        "--constraint=gpu&hbm80g",
        "--gpus-per-node=4",
        "-C gpu",
        "-L scratch",
    )
    sched = SlurmScheduler.from_profile(profile)
    assert sched.option_args == [
        "--constraint=gpu&hbm80g",
        "--gpus-per-node=4",
        "-C",
        "gpu",
        "-L",
        "scratch",
    ]


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("--nodes=2", "max_nodes_per_block"),
        ("-N 2", "max_nodes_per_block"),
        ("-N2", "max_nodes_per_block"),
        ("--time=30", "max_walltime_s"),
        ("-t 30", "max_walltime_s"),
        ("--job-name=x", "names its blocks"),
        ("-J x", "names its blocks"),
        ("--partition=debug", "`partition`"),
        ("--part=debug", "`partition`"),  # sbatch takes a prefix
        ("--qos=regular", "`qos`"),
        ("--account=m1234", "`account`"),
        ("-A m1234", "`account`"),
        ("--output=x.out", "script_dir"),
        ("--nodelist=n1", "pin_nodes"),
        ("--signal=B:USR1@60", "signal_margin_s"),
        ("--wait", "wait for the block"),
    ],
)
def test_slurm_options_the_provider_sets_are_refused_with_the_key_to_use(
    option: str, says: str
) -> None:
    with pytest.raises(ConfigError, match="submit_options") as err:
        _slurm(submit_options=["--constraint=gpu", option])
    assert says in str(err.value)
    assert "item 2" in str(err.value)


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("-l walltime=01:00:00", "max_walltime_s"),
        ("-l select=2:ncpus=64", "max_nodes_per_block"),
        ("-lfilesystems=home,place=free", "whole nodes"),
        ("-q debug", "`queue`"),
        ("-A m1234", "`account`"),
        ("-N name", "names its blocks"),
        ("-o out.txt", "script_dir"),
        ("-W depend=afterok:12", "start when it is planned"),
    ],
)
def test_pbs_options_the_provider_sets_are_refused_with_the_key_to_use(
    option: str, says: str
) -> None:
    with pytest.raises(ConfigError, match="submit_options") as err:
        load_profile("polaris").with_overrides(submit_options=[option])
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--constraint='gpu'"], "without quotes"),
        (["--comment=$HOME"], "need a shell"),
        (["--constraint=gpu; rm -rf x"], "need a shell"),
        (["--export=A\nB"], "need a shell"),
        (["constraint=gpu"], "starts with '-'"),
        (["--constraint gpu --gpus-per-node=4"], "one option"),
        (["-C", "gpu"], "starts with '-'"),  # a value alone in an item of its own
        ("--constraint=gpu", "not one string"),
    ],
)
def test_options_that_are_not_one_argument_each_are_refused(options: object, says: str) -> None:
    with pytest.raises(ConfigError, match="submit_options") as err:
        _slurm(submit_options=options)
    assert says in str(err.value)


def test_the_emulated_site_takes_no_submit_options() -> None:
    with pytest.raises(ConfigError, match=r"submit_options.*emulated"):
        load_profile("emulated").with_overrides(submit_options=["--constraint=gpu"])


def test_a_bad_option_in_a_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("scheduler: slurm\nsubmit_options:\n  - --constraint=gpu\n  - --time=10\n")
    with pytest.raises(ConfigError) as err:
        load_profile(str(path))
    assert str(path) in str(err.value) and "submit_options" in str(err.value)
    assert "max_walltime_s" in str(err.value)


# ------------------------------------------------------------------ given to submit and test


def test_slurm_submit_and_start_test_carry_the_options() -> None:
    sched = SlurmScheduler.from_profile(_slurm(submit_options=["--constraint=gpu", "-L fs"]))
    argv = sched.submit_argv(nodes=2, walltime_s=600, node_ids=("n4", "n5"), job_name="b")
    assert argv[argv.index("--constraint=gpu") :][:3] == ["--constraint=gpu", "-L", "fs"]
    assert sched.constraint() == [{"gpu"}]
    assert SlurmScheduler(submit_options=["-C gpu|cpu"]).constraint() == [{"gpu"}, {"cpu"}]
    assert SlurmScheduler(submit_options=["--constr=a&b"]).constraint() == [{"a", "b"}]
    # Counts and brackets are Slurm's to match: the snapshot does not guess.
    assert SlurmScheduler(submit_options=["-C [a*2&b]"]).constraint() is None


def test_pbs_block_script_shows_the_directive_and_qsub_gets_it(tmp_path: Path) -> None:
    pbs = FakePBS(tmp_path / "pbs", {"n1": {"state": "free"}})
    profile = load_profile("example-pbs").with_overrides(
        queue="workq",
        reservations=False,
        min_block_s=60,
        safety_margin_s=10,
        max_nodes_per_block=1,
        submit_options=["-l filesystems=home:eagle"],
    )
    provider = BackfillProvider(profile, env=pbs.env, slots=1, script_dir=str(tmp_path / "blocks"))
    try:
        provider.submit("exec sleep 600", 1, "parsl.htex.block-0")
        assert wait_for(lambda: any(c.startswith("qsub") for c in pbs.calls()), 30)
        (qsub,) = [c for c in pbs.calls() if c.startswith("qsub")]
        assert " -l filesystems=home:eagle " in f"{qsub} "
        (script,) = (tmp_path / "blocks").glob("*.sh")
        lines = script.read_text().splitlines()
        # Right after the interpreter line, before any command: where qsub reads directives.
        assert lines[0].startswith("#!") and lines[1] == OPTIONS_MARK
        assert lines[2] == "#PBS -l filesystems=home:eagle"
        # An argument vector (no script file) gets them on the command line alone.
        argv = PBSScheduler.from_profile(profile).qsub_argv(["true"], nodes=1, walltime_s=60)
        assert argv[argv.index("--") - 2 : argv.index("--")] == ["-l", "filesystems=home:eagle"]
    finally:
        provider.close()


# ------------------------------------------------------------------ the live Slurm cluster


@pytest.fixture(scope="module")
def featured(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The cluster with its node features; a cluster started before scripts/slurm-cluster
    gave nodes features gets them now, live (the same as its slurm.conf would give)."""

    def have() -> dict[str, str]:
        rows = run_slurm(slurm_cluster, "sinfo", "-h", "-N", "-o", "%N %f").split("\n")
        return {r.split()[0]: r.split()[1] for r in rows if r.strip()}

    if any(have().get(n) != f for n, f in FEATURES.items()):
        for feature in sorted(set(FEATURES.values())):
            nodes = ",".join(n for n, f in FEATURES.items() if f == feature)
            run_slurm(
                slurm_cluster, "scontrol", "update", f"NodeName={nodes}",
                f"AvailableFeatures={feature}", f"ActiveFeatures={feature}",
            )  # fmt: skip
    assert {n: have().get(n) for n in FEATURES} == FEATURES
    return slurm_cluster


@pytest.mark.slurm
def test_slurm_start_test_and_snapshot_follow_the_constraint(
    featured: SlurmCluster,
    slurm_jobs: list[str],  # noqa: F811 (the fixture: cancelled, and gone, after the test)
) -> None:
    sched = SlurmScheduler.from_profile(
        _slurm(submit_options=["--constraint=gpu"]), env=featured.env
    )
    # The start test asks Slurm with the constraint: it answers with featured nodes only.
    _start, hosts = sched.start_estimate(1, 120)
    assert set(hosts) <= GPU_NODES, hosts
    with pytest.raises(StartRefused):
        SlurmScheduler(submit_options=["--constraint=nosuchfeature"], env=featured.env).test_start(
            1, 120
        )
    # The snapshot keeps the blocks' partition on featured nodes only, so none is planned
    # on a node Slurm would refuse it.
    snap = sched.snapshot()
    harvest = {n.name for n in snap.nodes if "harvest" in n.partitions}
    assert harvest == GPU_NODES
    assert all("batch" in n.partitions for n in snap.nodes)  # native jobs' view unchanged
    # An argument vector goes through the wrapper script, which carries the directive.
    job = sched.submit(["sleep", "30"], nodes=1, walltime_s=60, name="opts-argv")
    slurm_jobs.append(job)
    stored = run_slurm(featured, "scontrol", "write", "batch_script", job, "-")
    assert "#SBATCH --constraint=gpu" in stored
    assert "Features=gpu" in run_slurm(featured, "scontrol", "show", "job", "-o", job)


@pytest.mark.slurm
def test_a_block_with_a_constraint_runs_only_on_featured_nodes(
    featured: SlurmCluster, providers: Callable[..., BackfillProvider], tmp_path: Path
) -> None:
    profile = _slurm(submit_options=["--constraint=gpu"])
    provider = providers(profile, autostart=False)
    provider.submit("exec sleep 600", 1, "parsl.htex.block-0")

    def running() -> bool:
        provider.poll_once()
        return any(b.phase is Phase.RUNNING for b in provider.blocks())

    assert wait_for(running, 20, step_s=1.0), [r.skipped for r in [provider.poll_once()]]
    (block,) = [b for b in provider.blocks() if b.phase is Phase.RUNNING]
    assert block.nodes and set(block.nodes) <= GPU_NODES, block.nodes
    shown = run_slurm(featured, "squeue", "-h", "-j", str(block.job_id), "-o", "%f %N")
    assert shown.split()[0] == "gpu"
    stored = run_slurm(featured, "scontrol", "write", "batch_script", str(block.job_id), "-")
    assert "#SBATCH --constraint=gpu" in stored.splitlines()
    (script,) = (tmp_path / "blocks").glob("*.sh")
    assert "#SBATCH --constraint=gpu" in script.read_text().splitlines()
