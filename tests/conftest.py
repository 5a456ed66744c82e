"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from parsl_malleable import data
from tests import background_checks, host_cluster, pbs_server
from tests.host_cluster import HostCluster
from tests.pbs_server import PBSServer

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Parsl's HTEX starts ``process_worker_pool.py`` by name: put this interpreter's bin/ on
    PATH, as an activated venv would, so the README's test command needs no PATH set-up."""
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="session")
def pbs_live_server() -> PBSServer:
    """The live OpenPBS server (``tests/pbs_server.py``); skipped when none runs, failed
    when ``.ci/run`` started one (``PM_PBS_LIVE=1``) that does not answer."""
    return pbs_server.connect()


@pytest.fixture
def pbs(pbs_live_server: PBSServer) -> Iterator[PBSServer]:
    """The live PBS server with no job left and every vnode free, before and after the test."""
    pbs_live_server.clear()
    yield pbs_live_server
    pbs_live_server.clear()


@pytest.fixture(scope="session")
def host_cluster_session() -> Iterator[HostCluster]:
    """The cluster of namespaced hosts (``tests/host_cluster.py``), for the whole session."""
    yield from host_cluster.session()


@pytest.fixture
def hosts(host_cluster_session: HostCluster) -> Iterator[HostCluster]:
    """The host cluster; every job the test started there cancelled, every link restored and
    every host back in service afterwards (a test after a cut must not wait for Slurm)."""
    try:
        yield host_cluster_session
    finally:
        host_cluster_session.cancel_all()
        host_cluster_session.wait_in_service()


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The data the project carries (``parsl_malleable/data``: compressed traces, workloads)."""
    path = data.data_dir()
    if not (path / "traces").is_dir():
        pytest.fail(f"carried data not found at {path} (parsl_malleable/data/traces)")
    return path


@pytest.fixture(scope="session")
def traces_dir(data_root: Path) -> Path:
    """Real SWF traces, gzipped (``theta_2022.swf.gz``, ...) with their ``.machines`` files."""
    return data_root / "traces"


@pytest.fixture(scope="session")
def bftrainer_dir(data_root: Path) -> Path:
    """The FreeTrain/BFTrainer workloads and the Summit idle trace, gzipped CSVs."""
    return data_root / "bftrainer"


# With pytest-xdist (the README's command runs two workers), the tests that share one resource
# run on one worker, in collection order: the Slurm cluster (one per machine, and the tests
# assume its nodes idle), the live PBS server (the same) and the wheel's venv (built once per
# worker that needs it). The type check joins the Slurm tests: that worker mostly waits on the
# scheduler, and its first Slurm test starts mypy in the background (tests/background_checks.py).
SLURM_GROUP = "slurm-cluster"
WHEEL_GROUP = "wheel-venv"
PBS_GROUP = "pbs-server"
HOSTS_GROUP = "host-cluster"
TYPES_TEST = "tests/test_types.py"


def resource_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that needs a shared resource; None for any other."""
    names = getattr(item, "fixturenames", ())
    if item.get_closest_marker("slurm") or "slurm_cluster" in names:
        return SLURM_GROUP
    if item.nodeid.startswith(TYPES_TEST):
        return SLURM_GROUP
    if "wheel_venv" in names:
        return WHEEL_GROUP
    if "pbs" in names:
        return PBS_GROUP
    if "hosts" in names:
        return HOSTS_GROUP
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if group := resource_group(item):
            item.add_marker(pytest.mark.xdist_group(group))


# Under xdist: whether this worker's session collected the type check, which the first Slurm
# test it runs then starts (collected once per session, not looked up at every test).
TYPES_PENDING = pytest.StashKey[bool]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the type check in the background when the session will run it (see
    ``tests/background_checks.py``); under xdist, every worker collects every test, so the
    worker that gets the type check starts it (``pytest_runtest_setup``)."""
    collected = any(i.nodeid.startswith(TYPES_TEST) for i in session.items)
    if "PYTEST_XDIST_WORKER" in os.environ:
        session.stash[TYPES_PENDING] = collected
    elif collected:
        background_checks.mypy()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.session.stash.get(TYPES_PENDING, False) and resource_group(item) == SLURM_GROUP:
        background_checks.mypy()


@pytest.fixture(autouse=True)
def _no_parsl_config_left_loaded() -> Iterator[None]:
    """A test that failed inside ``with parsl.load(...)`` (a timeout, say) can leave Parsl's
    config loaded, and every later test of that worker then failed with "Config has already
    been loaded": one failure read as ten. The leftover is cleared, and named in the log."""
    yield
    dflow = sys.modules.get("parsl.dataflow.dflow")
    if dflow is not None and dflow.DataFlowKernelLoader._dfk is not None:
        print("conftest: clearing a Parsl config this test left loaded", file=sys.stderr)
        dflow.DataFlowKernelLoader.clear()
