"""The emulated site: native schedule, snapshots, blocks as real processes, reclaims, cleanup."""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.emulated.native_load import (
    NativeJob,
    NativeSchedule,
    load_trace,
    native_schedule,
)
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.sim.trace_replay import simulate
from parsl_malleable.snapshot import NodeState
from tests.provider.conftest import wait_for as poll_until

REPO = Path(__file__).resolve().parents[2]
Make = Callable[..., EmulatedSite]


# Polls as often as this site changes; the helper is the provider tests' own.
wait_for = functools.partial(poll_until, step_s=0.05)


def group_members(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in process group ``pgid``, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def hand_schedule(nodes: int, *jobs: tuple[str, int, float, float, float]) -> NativeSchedule:
    """Natives ``(id, size, queued, start, end)`` in seconds from now; limit = runtime + 30."""
    t0 = time.time()
    natives = tuple(
        NativeJob(j, k, t0 + q, t0 + s, t0 + e, (e - s) + 30.0)
        for j, k, q, s, e in sorted(jobs, key=lambda x: x[3])
    )
    return NativeSchedule(natives, t0, 0.0, 1.0, nodes)


@pytest.fixture
def sites() -> Iterator[Make]:
    """Make sites; each is closed afterwards and must leave no block process behind."""
    made: list[EmulatedSite] = []

    def make(settings: EmulatedSettings | None = None, **kwargs: object) -> EmulatedSite:
        schedule = kwargs.get("schedule")
        nodes = schedule.nodes if isinstance(schedule, NativeSchedule) else 3
        site = EmulatedSite(settings or EmulatedSettings(nodes=nodes), **kwargs)  # type: ignore[arg-type]
        made.append(site)
        return site

    yield make
    for site in made:
        groups = [p.pid for b in site._blocks.values() for p in b.procs.values()]
        site.close()
        assert wait_for(lambda: not any(group_members(g) for g in groups), 5)


def script(tmp_path: Path, body: str, name: str = "block.sh") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    return path


# ---------------------------------------------------------------------- native schedule


def test_native_starts_equal_the_simulation_and_never_share_a_node(sites: Make) -> None:
    settings = EmulatedSettings(nodes=4, jobs=80, load=0.9, seed=3, speedup=60000.0)
    site = sites(settings)
    schedule = site.schedule
    # The same trace through the simulator, mapped to wall time independently.
    sim = simulate(load_trace(settings), "easy", nodes=4).jobs.set_index("job_id")
    expected = {
        str(i): schedule.t0 + (row.sim_start - schedule.origin) / settings.speedup
        for i, row in sim.iterrows()
        if row.sim_end > schedule.origin and row.sim_end > row.sim_start
    }
    assert {j.job_id for j in schedule.jobs} == set(expected)
    for job in schedule.jobs:
        assert job.start == pytest.approx(expected[job.job_id], abs=1e-6)

    assert wait_for(lambda: len(site.native_runs) >= 20, 20), len(site.native_runs)
    by_id = {j.job_id: j for j in schedule.jobs}
    for run in site.native_runs:
        assert run.start == by_id[run.job_id].start
        assert len(run.nodes) == by_id[run.job_id].size
    per_node: dict[str, list[tuple[float, float]]] = {}
    for run in site.native_runs:
        for node in run.nodes:
            per_node.setdefault(node, []).append((run.start, run.end))
    for node, intervals in per_node.items():
        intervals.sort()
        for (_s1, e1), (s2, _e2) in itertools.pairwise(intervals):
            assert e1 <= s2, f"two natives on {node}"
    assert site.reclaim_count == 0


def test_pending_natives_are_shown_with_their_simulated_start(sites: Make, tmp_path: Path) -> None:
    # 2 nodes: job 1 holds one node for 60 trace s; job 2 (2 nodes) arrives at 10, starts at 60.
    trace = tmp_path / "two.swf"
    trace.write_text(
        "; MaxNodes: 2\n; MaxProcs: 2\n"
        "1 0 0 60 1 -1 -1 1 120 -1 1 1 -1 -1 -1 -1 -1 -1\n"
        "2 10 50 10 2 -1 -1 2 600 -1 1 2 -1 -1 -1 -1 -1 -1\n"
    )
    site = sites(EmulatedSettings(nodes=2, trace=str(trace), speedup=10.0, start_s=0))
    t0 = site.schedule.t0
    first = site.snapshot()
    assert [j.job_id for j in first.running] == ["1"] and first.pending == []
    assert first.running[0].time_limit == pytest.approx(12.0)
    assert [n.state for n in first.nodes] == [NodeState.ALLOCATED, NodeState.IDLE]
    assert wait_for(lambda: site.snapshot().pending != [], 5)
    snap = site.snapshot()
    (pending,) = snap.pending
    assert pending.job_id == "2" and pending.num_nodes == 2
    assert pending.submit == pytest.approx(t0 + 1.0)
    assert pending.expected_start == pytest.approx(t0 + 6.0)
    assert pending.time_limit == pytest.approx(60.0)
    assert snap.backfill == "easy"
    assert site.status(["2"])["2"].state is JobState.PENDING


# ------------------------------------------------------------------------------ blocks


def test_a_block_runs_one_process_per_node_with_its_env(sites: Make, tmp_path: Path) -> None:
    site = sites(schedule=hand_schedule(3, ("n1", 1, 0, 0, 600)))
    body = """
        echo "$PM_NODE_NAME $PM_BLOCK_JOB_ID $$ $(ps -o pgid= $$)" >> "$(dirname "$0")/where"
        exec sleep 300
    """
    path = script(tmp_path, body)
    snap = site.snapshot()
    idle = snap.idle_nodes()
    assert idle == ["vn2", "vn3"]
    assert site.test_start(2, 60, idle) == pytest.approx(time.time(), abs=1)
    job = site.submit(path, nodes=2, walltime_s=60, node_ids=idle, name="pm-block-t-0")
    where = tmp_path / "where"
    assert wait_for(lambda: where.exists() and len(where.read_text().splitlines()) == 2, 10)
    block = site.block(job)
    assert block is not None
    rows = sorted(line.split() for line in where.read_text().splitlines())
    assert [r[0] for r in rows] == ["vn2", "vn3"] and {r[1] for r in rows} == {job}
    for node, _job, _pid, pgid in rows:
        assert int(pgid) == block.procs[node].pid  # each node: its own process group
    assert len({r[3] for r in rows}) == 2
    snap = site.snapshot()
    ours = [j for j in snap.running if j.ours]
    assert [(j.job_id, j.nodes, j.time_limit) for j in ours] == [(job, ("vn2", "vn3"), 60.0)]
    assert snap.idle_nodes() == []
    assert site.node_counts().ours == 2
    # Busy nodes: not now, and a pinned submit there is refused.
    assert site.test_start(1, 60, ["vn2"]) > time.time() + 50
    with pytest.raises(Exception, match="not idle"):
        site.submit(path, nodes=1, walltime_s=60, node_ids=["vn2"], name="pm-block-t-1")

    site.cancel([job])
    assert site.status([job])[job].state is JobState.CANCELLED
    groups = [p.pid for p in block.procs.values()] or [int(r[3]) for r in rows]
    assert wait_for(lambda: not any(group_members(g) for g in groups), 5)
    assert site.snapshot().idle_nodes() == ["vn2", "vn3"]


def test_walltime_ends_a_block_as_timeout_after_usr1(sites: Make, tmp_path: Path) -> None:
    site = sites(signal_margin_s=1.0, schedule=hand_schedule(2, ("n1", 1, 0, 600, 900)))
    body = """
        trap 'echo usr1 >> "$(dirname "$0")/signals"' USR1
        sleep 300 &
        echo $! > "$(dirname "$0")/child-$PM_NODE_NAME"
        while :; do wait; done
    """
    path = script(tmp_path, body)
    job = site.submit(path, nodes=2, walltime_s=2.5, node_ids=["vn1", "vn2"], name="pm-block-w")
    block = site.block(job)
    assert block is not None
    groups = [p.pid for p in block.procs.values()]
    assert wait_for(lambda: site.status([job])[job].state is JobState.TIMEOUT, 10)
    st = site.status([job])[job]
    assert st.end_limit == pytest.approx(st.start + 2.5)  # type: ignore[operator]
    # USR1 reached each batch shell a margin before the walltime, and only the shells: the
    # sleep children (which would die of USR1) survived it until the TERM.
    assert (tmp_path / "signals").read_text().split() == ["usr1", "usr1"]
    assert wait_for(lambda: not any(group_members(g) for g in groups), 5)


def test_signal_batch_reaches_the_batch_shell_only(sites: Make, tmp_path: Path) -> None:
    site = sites(schedule=hand_schedule(1, ("n1", 1, 0, 600, 900)))
    body = """
        trap 'echo usr1 >> "$(dirname "$0")/signals"' USR1
        sleep 300 &
        echo $! > "$(dirname "$0")/child"
        while :; do wait; done
    """
    path = script(tmp_path, body)
    job = site.submit(path, nodes=1, walltime_s=60, node_ids=["vn1"], name="pm-block-s")
    child = tmp_path / "child"
    assert wait_for(lambda: child.exists() and child.read_text().strip() != "", 10)
    site.signal_batch([job], "USR1")
    assert wait_for(lambda: (tmp_path / "signals").exists(), 5)
    os.kill(int(child.read_text()), 0)  # the worker stand-in did not get USR1
    assert site.status([job])[job].state is JobState.RUNNING
    site.cancel([job])


def test_a_native_takes_free_nodes_before_nodes_of_blocks(sites: Make, tmp_path: Path) -> None:
    site = sites(schedule=hand_schedule(3, ("n1", 1, 0, 1.5, 600)))
    path = script(tmp_path, "exec sleep 300\n")
    job = site.submit(path, nodes=1, walltime_s=60, node_ids=["vn1"], name="pm-block-p")
    assert wait_for(lambda: site.native_runs != [], 10)
    assert site.native_runs[0].nodes == ("vn2",)
    assert site.status([job])[job].state is JobState.RUNNING and site.reclaim_count == 0


def test_a_native_reclaims_the_nodes_of_a_block(sites: Make, tmp_path: Path) -> None:
    # vn1 busy for 1 s; a 2-node native starts at 2 s; our block holds vn2 until 60 s.
    site = sites(schedule=hand_schedule(2, ("a", 1, 0, 0, 1), ("big", 2, 0.5, 2.0, 600)))
    path = script(tmp_path, "sleep 300 & wait\n")
    job = site.submit(path, nodes=1, walltime_s=60, node_ids=["vn2"], name="pm-block-r")
    block = site.block(job)
    assert block is not None
    groups = [p.pid for p in block.procs.values()]
    assert wait_for(lambda: site.status([job])[job].state is JobState.PREEMPTED, 10)
    assert site.reclaim_count == 1
    (reclaim,) = site.reclaims
    assert (reclaim.native_id, reclaim.block_id, reclaim.nodes) == ("big", job, ("vn2",))
    assert "big" in site.status([job])[job].reason
    snap = site.snapshot()
    assert [(j.job_id, j.nodes) for j in snap.running] == [("big", ("vn1", "vn2"))]
    assert wait_for(lambda: not any(group_members(g) for g in groups), 5)


_DRIVER = """
import sys, time
from pathlib import Path
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.emulated.native_load import NativeSchedule

site = EmulatedSite(EmulatedSettings(nodes=2), schedule=NativeSchedule((), time.time(), 0, 1, 2))
job = site.submit(Path(sys.argv[1]), nodes=2, walltime_s=300, node_ids=["vn1", "vn2"],
                  name="pm-block-d")
print(*[p.pid for p in site.block(job).procs.values()], flush=True)
time.sleep(300)
"""


def test_a_killed_driver_leaves_no_block_process(tmp_path: Path) -> None:
    path = script(tmp_path, "sleep 300 &\nsleep 300 &\nwait\n")
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert driver.stdout is not None
        groups = [int(p) for p in driver.stdout.readline().split()]
        assert len(groups) == 2
        # wrapper + batch shell + two sleeps per node
        assert wait_for(lambda: all(len(group_members(g)) == 4 for g in groups), 10)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        assert wait_for(lambda: not any(group_members(g) for g in groups), 3)
    finally:
        driver.kill()
        driver.wait()


# ---------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scheduler: emulated\nlauncher: none\n", "emulated: required"),
        ("scheduler: emulated\nlauncher: none\nemulated: {speedup: 0}\n", "emulated.speedup"),
        ("scheduler: emulated\nlauncher: none\nemulated: {speedd: 3}\n", "emulated.speedd"),
        ("scheduler: emulated\nlauncher: none\nemulated: {trace: /no/such}\n", "emulated.trace"),
        ("scheduler: emulated\nlauncher: none\nemulated: {node_prefix: 1x}\n", "node_prefix"),
        ("scheduler: emulated\nemulated: {}\n", "launcher"),
        ("scheduler: slurm\nemulated: {}\n", "emulated: only for scheduler: emulated"),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_profile(path)
    assert "bad.yaml" in str(info.value)


def test_a_start_after_the_trace_is_refused() -> None:
    settings = EmulatedSettings(nodes=2, jobs=5, start_s=1e9)
    with pytest.raises(ConfigError, match=r"emulated\.start_s"):
        native_schedule(settings)


def test_the_shipped_profile_is_an_emulated_site() -> None:
    profile = load_profile("emulated")
    assert profile.scheduler == "emulated" and profile.emulated is not None
    assert profile.max_harvested_nodes == profile.emulated.nodes
    assert profile.launcher == "none" and profile.address == "127.0.0.1"


def test_a_killed_blocks_pymp_folders_go_with_the_site(
    sites: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A pool killed with its block never removes multiprocessing's pymp-* folder: they stayed
    in the temporary folder after every run. The blocks get a private one, removed at close."""
    # Short: a socket path under it must fit 107 bytes (pytest's tmp_path is too long).
    user_tmp = Path(tempfile.mkdtemp(prefix="pm-t-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(user_tmp))
    request.addfinalizer(lambda: shutil.rmtree(user_tmp, ignore_errors=True))
    site = sites(schedule=hand_schedule(2))
    body = f"""
        {sys.executable} -c 'import multiprocessing.connection as c, os, time
        listener = c.Listener(family="AF_UNIX")  # makes $TMPDIR/pymp-XXXXXXXX
        open(os.environ["PM_NODE_NAME"] + ".ready", "w").write(os.path.dirname(listener.address))
        time.sleep(300)'
    """
    job = site.submit(script(tmp_path, body), nodes=2, walltime_s=60, name="pm-block-t-0")
    ready = [tmp_path / f"vn{i}.ready" for i in (1, 2)]
    assert wait_for(lambda: all(p.exists() and p.read_text() for p in ready), 20)
    folders = [Path(p.read_text()) for p in ready]
    private = {f.parent for f in folders}
    assert len(private) == 1 and private.pop().parent == user_tmp
    assert all(f.name.startswith("pymp-") and f.is_dir() for f in folders)
    site.cancel([job])  # TERM, then KILL: no finalizer of theirs runs
    site.close()
    assert list(user_tmp.iterdir()) == []


def test_under_a_long_tmpdir_the_blocks_keep_it_as_it_is(
    sites: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One more level under a TMPDIR of 70 bytes would push a pool's socket past AF_UNIX's 107
    (the pools failed to start: the notebook's test); the blocks then use the TMPDIR itself,
    which campaign/tmpdir_check.py accepts up to 75 bytes."""
    long_tmp = tmp_path / ("t" * max(1, 70 - len(os.fsencode(tmp_path)) - 1))
    long_tmp.mkdir()
    assert len(os.fsencode(long_tmp)) >= 70
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    site = sites(schedule=hand_schedule(2))
    assert "TMPDIR" not in site.env
    assert list(long_tmp.iterdir()) == []
