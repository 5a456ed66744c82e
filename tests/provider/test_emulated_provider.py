"""BackfillProvider on the emulated site: the same provider, a batch system inside the process."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import parsl
import pytest
from parsl.config import Config
from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.ledger import JobRecord, Phase
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider, harvest_executor
from parsl_malleable.schedulers.emulated import EmulatedSite
from tests.provider.conftest import wait_for as poll_until

Make = Callable[..., BackfillProvider]
# HTEX starts process_worker_pool.py by name: this interpreter's bin/ goes first on PATH.
PATH = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


# Polls as often as this site changes; the helper is the provider tests' own.
wait_for = functools.partial(poll_until, step_s=0.1)


def swf(path: Path, nodes: int, *rows: tuple[int, float, float, float, int, float]) -> str:
    """A trace file: rows ``(id, submit, wait, runtime, nodes, walltime)`` in trace seconds."""
    lines = [f"; MaxNodes: {nodes}", f"; MaxProcs: {nodes}"]
    lines += [
        f"{i} {s:g} {w:g} {r:g} {k} -1 -1 {k} {wt:g} -1 1 1 -1 -1 -1 -1 -1 -1"
        for i, s, w, r, k, wt in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def providers(tmp_path: Path) -> Iterator[Make]:
    """Providers on the shipped emulated profile; closed afterwards, with their sites."""
    made: list[BackfillProvider] = []

    def make(**kwargs: object) -> BackfillProvider:
        kwargs.setdefault("script_dir", str(tmp_path / "blocks"))
        kwargs.setdefault("env", PATH)
        provider = BackfillProvider("emulated", **kwargs)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
        assert isinstance(provider.scheduler, EmulatedSite)
        provider.scheduler.close()


def test_a_block_yields_to_a_queued_native_before_it_starts(
    providers: Make, tmp_path: Path
) -> None:
    # 2 nodes at 4x: job 1 holds vn1 for 10 s (wall); job 2 needs both nodes, is queued at
    # 2 s and starts at 10 s. Our block on vn2 must be gone by then: a yield, not a reclaim.
    trace = swf(tmp_path / "t.swf", 2, (1, 0, 0, 40, 1, 40), (2, 8, 32, 100, 2, 600))
    provider = providers(
        emulated={"nodes": 2, "trace": trace, "speedup": 4.0, "start_s": 0}, slots=1
    )
    site = provider.scheduler
    assert isinstance(site, EmulatedSite)
    big_start = next(j.start for j in site.schedule.jobs if j.job_id == "2")
    provider.submit("sleep 600", 1, "parsl.htex.block-0")

    def running() -> list[str]:
        return [b.job_id for b in provider.blocks() if b.phase is Phase.RUNNING]

    assert wait_for(lambda: running() != [], 10), provider.last_report
    (block,) = running()
    assert site.status([block])[block].nodes == ("vn2",)
    assert time.time() < big_start - 4  # the block really had time to yield

    def record() -> JobRecord:
        return next(r for r in provider.history() if r.job_id == block)

    assert wait_for(lambda: record().end_state is not None, 15), provider.last_report
    assert record().cancel_reason is CancelReason.YIELD and record().end_state is P.TIMEOUT
    ended = site.status([block])[block]
    assert ended.end_limit is not None and ended.end_limit < big_start
    assert wait_for(lambda: any(r.job_id == "2" for r in site.native_runs), 15)
    assert next(r.nodes for r in site.native_runs if r.job_id == "2") == ("vn1", "vn2")
    assert site.reclaim_count == 0


_WHERE = """
def where():
    import os
    from parsl_malleable.controller.node_agent import where_am_i

    here = where_am_i()
    return os.environ.get("PM_NODE_NAME"), here["node"], here["job_id"]
"""


@pytest.mark.slow
def test_a_python_app_runs_on_an_emulated_node(providers: Make, tmp_path: Path) -> None:
    # Job 2 lies far in the future: both nodes are idle for the whole test.
    trace = swf(tmp_path / "t.swf", 2, (1, 0, 0, 1, 1, 60), (2, 10000, 0, 60, 2, 600))
    provider = providers(emulated={"nodes": 2, "trace": trace, "speedup": 1.0, "start_s": 0})
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(_WHERE, namespace)  # shipped by value: workers cannot import this test module
    where = parsl.python_app(namespace["where"])  # type: ignore[arg-type]
    config = Config(executors=[harvest_executor(provider)], run_dir=str(tmp_path / "runinfo"))
    with parsl.load(config):
        node, agent_node, job_id = where().result(timeout=60)
    assert node in ("vn1", "vn2") and agent_node == node
    assert job_id in {r.job_id for r in provider.history()}
