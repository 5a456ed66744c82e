"""Native-job delay and harvest on the real local Slurm cluster, in each provider mode.

A stream of native jobs (1-3 nodes, seconds to a minute long, Slurm limits of 1-3 minutes,
fixed seed) is replayed in real time on the local cluster (``scripts/slurm-cluster start``):

* ``baseline`` twice, without harvesting: the difference between the two runs is Slurm's own
  run-to-run noise, the yardstick for any delay;
* ``poll``: a :class:`BackfillProvider` in polling mode (profile ``slurm-test``, partition
  ``harvest``, never preempted: the provider yields blocks itself; 5 s polls);
* ``poll-watch``: the same with ``watch_interval_s: 1`` (one small ``squeue`` a second between
  polls; a native arrival or end seen there starts a poll at once);
* ``preempt``: the provider in preemption mode (profile ``slurm-preempt``, partition
  ``scavenger``: Slurm cancels a block there when a native job needs its nodes);
* ``preempt-watch``: the same with the queue watch, which here refills slots as soon as a
  native job's start or end shows, instead of at the next poll.

The harvesting runs open every slot before the first native job arrives, so blocks hold the
idle machine and each arrival has to get its nodes back. Each native job records when it
started (its own clock, sub-second); each block node records when it started and ended.

Prints, per mode: per-job delay against the first baseline (mean, max, and how many jobs were
delayed more than the noise's max), harvested / idle node-seconds (idle: node-seconds the native
jobs left unused between the first submission and the last native end, in that run), and
yields (blocks the provider cancelled to yield, and blocks Slurm preempted).

Run: ``python benchmarks/bench_live_harvest.py [--jobs 26] [--seed 1] [--modes ...] [--out F]``
(about 4 minutes per run; modes ``poll,poll-watch,preempt`` by default).

``--scheduler pbs`` runs the same experiment on the live OpenPBS server (``scripts/pbs-server
start``: one MoM carrying vnodes vn1..vn6): the same stream, each native job submitted to
``workq`` as the user ``pbsnative`` (``-l select=N:ncpus=1 -l place=scatter -l walltime=``its
limit), blocks through profile ``pbs-test`` (queue ``backfill``, 3 s polls, a block per vnode).
PBS here preempts nothing and the queue watch is Slurm's, so the one mode is ``poll``. Printed
besides: natives done, the block jobs of ours still unfinished after the provider closed
(``qselect -u`` this user: none is the requirement) and how long they took to go, the natives
that waited for a block (a vnode they ran on was held by a block told to go after their
submission: their delay, submit -> told, told -> start), and the provider's queries a poll.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hostlist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO

from parsl_malleable.harvest.ledger import JobRecord
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider

NODES = 6
PAIRS = {"max_nodes_per_block": 2, "max_blocks": 3}
# mode -> (profile, overrides)
PROFILES: dict[str, tuple[str, dict[str, float | None]]] = {
    "poll": ("slurm-test", {}),
    "poll-watch": ("slurm-test", {"watch_interval_s": 1.0}),
    # The preemption runs of docs/benchmarks.md: 3 slots of up to 2 nodes, polls only (the
    # profile now has a block per node and the watch; bench_live_training.py measures that).
    "preempt": ("slurm-preempt", {**PAIRS, "watch_interval_s": None}),
    "preempt-watch": ("slurm-preempt", PAIRS),
}
# On the live PBS server: polling mode only (PBS here preempts nothing; the watch is Slurm's).
# pbs-test watches the queue between polls (plain qstat -t a second); poll-nowatch is the same
# without the watch, to compare.
PBS_PROFILES: dict[str, tuple[str, dict[str, float | None]]] = {
    "poll": ("pbs-test", {}),
    "poll-nowatch": ("pbs-test", {"watch_interval_s": None}),
}
# What a block runs on each node: a stand-in worker pool that records its life and, like
# Parsl's, exits on SIGTERM.
BLOCK_COMMAND = (
    'f="{dir}/block-$SLURM_JOB_ID-$SLURM_NODEID"; echo "$(date +%s.%N)" > "$f.start"; '
    'trap \'echo "$(date +%s.%N)" > "$f.end"; kill $pid 2>/dev/null; exit 0\' TERM; '
    'sleep 3600 & pid=$!; wait $pid; echo "$(date +%s.%N)" > "$f.end"'
)
# The same on PBS: the block script runs it once (launcher: none), so it records its vnode
# count ($PBS_NODEFILE: a line per chunk) as the weight of its seconds. Its end is also stamped
# from outside the job's session (setsid; tail --pid): on this server a signal to a root job
# ends it with SIGKILL before any trap runs (docs/benchmarks.md, "Live PBS").
BLOCK_COMMAND_PBS = (
    'f="{dir}/block-$PBS_JOBID"; {{ date +%s.%N; wc -l < "$PBS_NODEFILE"; }} > "$f.start"; '
    "setsid sh -c 'tail -s 0.1 --pid=$0 -f /dev/null; "
    '[ -e "$1.end" ] || date +%s.%N > "$1.end"\' $$ "$f" </dev/null >/dev/null 2>&1 & '
    'trap \'echo "$(date +%s.%N)" > "$f.end"; kill $pid 2>/dev/null; exit 0\' TERM; '
    'sleep 3600 & pid=$!; wait $pid; echo "$(date +%s.%N)" > "$f.end"'
)


@dataclass(frozen=True)
class Native:
    """One job of the stream: arrives ``at`` seconds after the first, ``nodes`` x ``run_s``."""

    index: int
    at: float
    nodes: int
    run_s: float
    limit_min: int


@dataclass
class RunResult:
    """What one replay measured."""

    mode: str
    waits: dict[int, float]
    idle_node_s: float
    harvested_node_s: float
    yields: int
    preempted: int
    blocks: int
    # Printed on PBS only (Slurm's output stays as it was):
    natives_done: int = 0
    blocks_left: list[str] = field(default_factory=list)  # ours unfinished after close
    gone_after_s: float | None = None  # close() -> no job of ours unfinished
    block_waits: BlockWaits | None = None
    polls: int = 0
    queries: int = 0
    yields_ahead: int = 0  # yields for a planned start a block's own end could miss


@dataclass
class BlockWaits:
    """The natives that waited for a block of ours: one of the vnodes each ran on was held by a
    block told to go (the yield notice; for any other cancel, the cancel) after the native's
    submission, or never told."""

    jobs: list[int]
    delays: list[float]  # their wait minus their first baseline's (filled by the report)
    to_notice: list[float]  # native submitted -> the last such block told to go
    to_start: list[float]  # that notice -> the native's start
    to_cancel: list[float]  # the notice -> the cancel (qdel) sent: the yield grace
    untold: int  # natives that waited for a block never told to go


def stream(jobs: int, seed: int) -> list[Native]:
    """The native job stream: Poisson arrivals (mean 6 s apart), 1-3 nodes, 5-40 s."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(jobs):
        run_s = rng.uniform(5, 40)
        out.append(Native(i, t, rng.randint(1, 3), run_s, 1 + rng.randint(0, 2)))
        t += rng.expovariate(1 / 6)
    return out


def slurm_env() -> dict[str, str]:
    conf = os.environ.get("SLURM_CONF", "/tmp/pm-slurm/slurm.conf")
    return {**os.environ, "SLURM_CONF": conf}


def slurm(*argv: str, check: bool = True) -> str:
    return subprocess.run(
        argv, env=slurm_env(), capture_output=True, text=True, timeout=30, check=check
    ).stdout


def wait_until(done: Callable[[], bool], timeout_s: float, step_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(step_s)
    return done()


def machine_idle() -> bool:
    # One line per node and partition: the three partitions share the nodes.
    rows = slurm("sinfo", "-h", "-N", "-o", "%N %T").split("\n")
    states = dict(row.split() for row in rows if row.strip())
    queue = slurm("squeue", "-h", "-o", "%i").split()
    return len(states) == NODES and all(s == "idle" for s in states.values()) and not queue


class Site:
    """What a live replay needs of one batch scheduler; everything else is the same on each.

    A native job writes its own start (its clock, first line) into ``out`` when it starts."""

    key = ""  # --scheduler
    name = ""  # as printed ("Slurm's own noise")
    label = "backfill"  # the provider's label: block job names start pm-block-<label>
    block_command = ""  # the stand-in worker of bench_live_harvest's blocks ({dir}: where)
    reports_leftovers = False  # print natives done, blocks left, waits for blocks (PBS)

    @property
    def ours_prefix(self) -> str:
        """How the names of our block jobs start (any other non-native job is a stranger's)."""
        return "pm-block" if self.label == "backfill" else f"pm-block-{self.label}-"

    @property
    def nodes(self) -> tuple[str, ...]:
        """The machine's node names."""
        raise NotImplementedError

    def missing(self) -> str | None:
        """Why this scheduler cannot be used here (None: it can)."""
        raise NotImplementedError

    def provider_env(self) -> dict[str, str]:
        """The environment the provider's scheduler commands need (added to this one)."""
        raise NotImplementedError

    def worker_init(self) -> str:
        """Shell lines a block needs before a Python worker can start."""
        return ""

    def prepare(self, run_dir: Path) -> None:
        """Make ``run_dir`` writable by the native jobs."""

    def submit_native(self, job: Native, out: Path) -> str:
        """Submit ``job`` (it writes its start into ``out``); its job id."""
        raise NotImplementedError

    def machine_idle(self) -> bool:
        """Every node idle and no job queued or running (anyone's)."""
        raise NotImplementedError

    def queue_names(self) -> list[str]:
        """The names of every unfinished job (anyone's)."""
        raise NotImplementedError

    def native_nodes(self, ids: dict[int, str], run_dir: Path) -> dict[int, list[str]]:
        """The nodes each native job ran on, by its index."""
        raise NotImplementedError

    def natives_finished(self, ids: dict[int, str]) -> int:
        """How many of the native jobs finished with exit status 0."""
        raise NotImplementedError

    def ours_unfinished(self) -> list[str]:
        """Ids of this user's unfinished jobs (the blocks: natives run as another user)."""
        raise NotImplementedError

    def cancel(self, ids: list[str]) -> None:
        raise NotImplementedError


class SlurmSite(Site):
    """The local Slurm cluster (``scripts/slurm-cluster start``): natives to ``batch``."""

    key = "slurm"
    name = "Slurm"
    block_command = BLOCK_COMMAND

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(f"n{i}" for i in range(1, NODES + 1))

    def missing(self) -> str | None:
        if shutil.which("sbatch") is None:
            return "needs the local Slurm cluster: scripts/slurm-cluster start"
        return None

    def provider_env(self) -> dict[str, str]:
        return {"SLURM_CONF": slurm_env()["SLURM_CONF"]}

    def submit_native(self, job: Native, out: Path) -> str:
        script = f'date +%s.%N > {out}; echo "$SLURM_JOB_NODELIST" >> {out}; sleep {job.run_s:.1f}'
        return slurm(
            "sbatch", "--parsable", "--partition=batch", f"-N{job.nodes}",
            f"-t{job.limit_min}", "--output=/dev/null", f"--job-name=native-{job.index}",
            "--wrap", script,
        ).strip()  # fmt: skip

    def machine_idle(self) -> bool:
        return machine_idle()

    def queue_names(self) -> list[str]:
        return slurm("squeue", "-h", "-o", "%j").split()

    def native_nodes(self, ids: dict[int, str], run_dir: Path) -> dict[int, list[str]]:
        return {
            i: hostlist.expand_hostlist((run_dir / f"native-{i}").read_text().split()[1])
            for i in ids
        }

    def natives_finished(self, ids: dict[int, str]) -> int:
        # Without accounting storage (sacct) an ended job's exit status is gone: count those
        # that are no longer queued.
        left = set(slurm("squeue", "-h", "-o", "%i").split())
        return sum(job_id not in left for job_id in ids.values())

    def ours_unfinished(self) -> list[str]:
        rows = slurm("squeue", "-h", "-u", getpass.getuser(), "-o", "%i %j").splitlines()
        return [r.split()[0] for r in rows if r.strip() and r.split()[1].startswith("pm-block")]

    def cancel(self, ids: list[str]) -> None:
        if ids:
            slurm("scancel", *ids, check=False)


PBS_EXEC = Path("/opt/pbs")
NATIVE_USER = "pbsnative"  # PBS refuses root's jobs except from acl_roots: natives run as this


class PBSSite(Site):
    """The live OpenPBS server (``scripts/pbs-server start``): natives to ``workq`` as
    ``pbsnative``, blocks to ``backfill`` as this user (root, allowed by ``acl_roots``)."""

    key = "pbs"
    name = "PBS"
    block_command = BLOCK_COMMAND_PBS
    reports_leftovers = True
    # Tests on the same server name their blocks pm-block-backfill-...: ours are told apart.
    label = "bench"

    def __init__(self, exact_limits: bool = False) -> None:
        self._nodes: tuple[str, ...] | None = None
        # Each native's walltime its run time + EXACT_SLACK_S (seconds), not whole minutes:
        # the queue's next start is then what PBS and the planner plan, within that slack.
        self.exact_limits = exact_limits
        # The driver's watchdog (a child process) cancels blocks with qdel if the driver
        # ends without releasing it: it must find PBS's commands too.
        os.environ["PATH"] = self.env()["PATH"]

    def env(self) -> dict[str, str]:
        path = os.environ.get("PATH", "")
        if str(PBS_EXEC / "bin") not in path.split(":"):
            path = f"{PBS_EXEC / 'bin'}:{PBS_EXEC / 'sbin'}:{path}"
        return {
            **os.environ,
            "PATH": path,
            "PBS_CONF_FILE": os.environ.get("PBS_CONF_FILE", "/etc/pbs.conf"),
            "PBS_EXEC": str(PBS_EXEC),
            "PBS_HOME": os.environ.get("PBS_HOME", "/var/spool/pbs"),
        }

    def run(self, *argv: str, user: str | None = None, check: bool = True) -> str:
        full = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        done = subprocess.run(
            full, env=self.env(), capture_output=True, text=True, timeout=30, cwd="/tmp"
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(full)}: rc {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def jobs(self, *, history: bool = False) -> dict[str, dict]:
        """``qstat -f [-x] -F json``'s jobs by id (without ``-x``: the unfinished ones)."""
        out = self.run("qstat", "-f", "-F", "json", *(["-x"] if history else []))
        return json.loads(out).get("Jobs", {})

    def vnodes(self) -> dict[str, dict]:
        return json.loads(self.run("pbsnodes", "-av", "-F", "json"))["nodes"]

    @property
    def nodes(self) -> tuple[str, ...]:
        if self._nodes is None:
            vnodes = self.vnodes()
            # The MoM's natural vnode (0 cpus) is no node.
            self._nodes = tuple(
                sorted(n for n, a in vnodes.items() if a["resources_available"].get("ncpus", 0))
            )
        return self._nodes

    def missing(self) -> str | None:
        if not (PBS_EXEC / "bin" / "qstat").exists():
            return f"no OpenPBS at {PBS_EXEC}: scripts/pbs-server install && start"
        try:
            self.run("qstat", "-B")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            return f"no live PBS server ({exc}): scripts/pbs-server start"
        if len(self.nodes) != NODES:
            return f"the PBS server has {len(self.nodes)} vnodes, not {NODES}: pbs-server start"
        return None

    def provider_env(self) -> dict[str, str]:
        return self.env()

    def worker_init(self) -> str:
        # A PBS job gets a login environment: the worker needs this interpreter first on PATH.
        return f"export PATH={Path(sys.executable).parent}:$PATH"

    def prepare(self, run_dir: Path) -> None:
        # Natives run as another user: they must reach and write the run's folder.
        run_dir.parent.chmod(0o755)
        run_dir.chmod(0o777)

    def submit_native(self, job: Native, out: Path) -> str:
        script = f"date +%s.%N > {out}; sleep {job.run_s:.1f}"
        limit = (
            str(math.ceil(job.run_s) + EXACT_SLACK_S)
            if self.exact_limits
            else f"00:{job.limit_min:02d}:00"
        )
        return self.run(
            "qsub", "-q", "workq", "-N", f"native-{job.index}",
            "-l", f"select={job.nodes}:ncpus=1", "-l", "place=scatter",
            "-l", f"walltime={limit}", "-o", "/dev/null", "-e", "/dev/null",
            "--", "/bin/sh", "-c", script, user=NATIVE_USER,
        ).strip()  # fmt: skip

    def machine_idle(self) -> bool:
        vnodes = self.vnodes()
        free = all(vnodes[n]["state"] == "free" for n in self.nodes)
        return free and not self.run("qselect").split()

    def queue_names(self) -> list[str]:
        return [a.get("Job_Name", "") for a in self.jobs().values()]

    def native_nodes(self, ids: dict[int, str], run_dir: Path) -> dict[int, list[str]]:
        # One query for all: ``qstat -f -x -F json ID1 ID2`` prints only the first job.
        jobs = self.jobs(history=True)
        return {i: _exec_vnodes(jobs[job_id].get("exec_vnode", "")) for i, job_id in ids.items()}

    def natives_finished(self, ids: dict[int, str]) -> int:
        jobs = self.jobs(history=True)
        return sum(
            jobs.get(j, {}).get("job_state") == "F" and jobs[j].get("Exit_status") == 0
            for j in ids.values()
        )

    def ours_unfinished(self) -> list[str]:
        # qselect -u: this user's unfinished jobs; of those, the blocks of this benchmark
        # (tests on the same server submit blocks as root too).
        mine = set(self.run("qselect", "-u", getpass.getuser()).split())
        jobs = self.jobs()
        return sorted(
            i for i in mine if jobs.get(i, {}).get("Job_Name", "").startswith(self.ours_prefix)
        )

    def cancel(self, ids: list[str]) -> None:
        for job_id in ids:  # one id per qdel: the README's advice on this build
            self.run("qdel", "-W", "force", job_id, check=False)


def _exec_vnodes(text: str) -> list[str]:
    """``(vn1:ncpus=1)+(vn2:ncpus=1)`` -> ``["vn1", "vn2"]``."""
    return [part.strip("()").split(":", 1)[0] for part in text.split("+") if part.strip("()")]


SITES: dict[str, Callable[[], Site]] = {"slurm": SlurmSite, "pbs": PBSSite}
MODES_OF = {"slurm": PROFILES, "pbs": PBS_PROFILES}
# --exact-limits: a native's walltime exceeds its run time by at most this (PBS takes seconds).
EXACT_SLACK_S = 1
DEFAULT_MODES = {"slurm": "poll,poll-watch,preempt", "pbs": "poll"}


def block_waits(
    history: list[JobRecord],
    natives: list[Native],
    submitted: dict[int, float],
    starts: dict[int, float],
    nodes: dict[int, list[str]],
    grace_s: float,
) -> BlockWaits:
    """Which natives waited for a block of ours, and how the wait splits (see BlockWaits). A
    yielding block is told ``grace_s`` before its cancel is sent (the ledger keeps the cancel)."""
    out = BlockWaits([], [], [], [], [], 0)

    def told(r: JobRecord) -> float | None:
        if r.cancel_sent_at is None:
            return None
        return r.cancel_sent_at - (grace_s if r.cancel_reason is CancelReason.YIELD else 0.0)

    for j in natives:
        sub, start = submitted[j.index], starts[j.index]
        notices: list[tuple[float, float]] = []  # (told, cancel sent) of each such block
        holders = 0
        for r in history:
            if r.start is None or r.start >= start or not set(r.nodes) & set(nodes[j.index]):
                continue
            if r.ended_at is not None and r.ended_at <= sub:
                continue
            notice = told(r)
            if notice is not None and notice < sub:
                continue  # told to go before this native came (its E state may remain)
            holders += 1
            if notice is not None and r.cancel_sent_at is not None:
                notices.append((notice, r.cancel_sent_at))
        if not holders:
            continue
        out.jobs.append(j.index)
        if len(notices) < holders:
            out.untold += 1
        if notices:
            notice, sent = max(notices)
            out.to_notice.append(notice - sub)
            out.to_start.append(start - notice)
            out.to_cancel.append(sent - notice)
    return out


def describe_waits(mode: str, waits: BlockWaits, total: int) -> str:
    """One line: how many natives waited for a block, by how much, and where the time went."""
    line = f"{mode}: natives that waited for a block: {len(waits.jobs)} of {total}"
    if waits.delays:
        line += (
            f" (delay vs first baseline: mean {statistics.mean(waits.delays):+.2f} s, "
            f"max {max(waits.delays):+.2f} s)"
        )
    if waits.to_notice:
        line += (
            f"; submit -> block told to go median {statistics.median(waits.to_notice):.2f} s "
            f"(max {max(waits.to_notice):.2f}), told -> native start median "
            f"{statistics.median(waits.to_start):.2f} s (max {max(waits.to_start):.2f}; the "
            f"qdel went {statistics.median(waits.to_cancel):.2f} s after the notice)"
        )
    if waits.untold:
        line += f"; {waits.untold} waited for a block never told to go"
    return line


def close_and_check(provider: BackfillProvider, site: Site, mode: str) -> tuple[list[str], float]:
    """Close the provider; the block jobs of ours still unfinished 60 s later (cancelled then,
    so the site is left clean) and how long they took to go."""
    began = time.monotonic()
    provider.close()
    closed = time.monotonic()
    gone = wait_until(lambda: not site.ours_unfinished(), 60)
    left = [] if gone else site.ours_unfinished()
    if left:
        print(f"# ERROR {mode}: block jobs left after close: {left}; cancelling", flush=True)
        site.cancel(left)
    print(
        f"# {mode}: close() {closed - began:.1f} s; unfinished jobs of ours gone "
        f"{time.monotonic() - closed:.1f} s later" + ("" if gone else " (NOT all: see above)"),
        flush=True,
    )
    return left, time.monotonic() - closed


def replay(
    mode: str,
    natives: list[Native],
    work: Path,
    slots: int | None = None,
    site: Site | None = None,
    extra: dict[str, Any] | None = None,
) -> RunResult:
    """Replay the stream once, harvesting with ``mode``'s profile (and ``extra`` profile
    settings) unless it is a baseline."""
    site = site or SlurmSite()
    if not wait_until(site.machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = work / f"{mode}-{time.monotonic_ns()}"
    run_dir.mkdir()
    site.prepare(run_dir)
    provider = None
    profiles = MODES_OF[site.key]
    if mode in profiles:
        profile, overrides = profiles[mode]
        provider = BackfillProvider(
            profile,
            label=site.label,
            script_dir=str(run_dir),
            env=site.provider_env(),
            slots=slots,
            **{**overrides, **(extra or {})},
        )
        for i in range(provider.slots):
            provider.submit(site.block_command.format(dir=run_dir), 1, f"parsl.block-{i}")

        def blocks_hold_machine() -> bool:
            held = sum(len(b.nodes) for b in provider.blocks() if b.start is not None)
            return held >= min(NODES, provider.profile.max_harvested_nodes)

        wait_until(blocks_hold_machine, 60)
    submitted: dict[int, float] = {}
    ids: dict[int, str] = {}
    t0 = time.time()
    for job in natives:
        delay = t0 + job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        submitted[job.index] = time.time()
        ids[job.index] = site.submit_native(job, run_dir / f"native-{job.index}")

    def natives_done() -> bool:
        names = site.queue_names()
        strangers.update(n for n in names if not n.startswith(("native-", site.ours_prefix)))
        return not any(n.startswith("native-") for n in names)

    strangers: set[str] = set()

    wait_until(natives_done, 600)
    if strangers:
        # Another user's jobs shared the cluster: this run's delays are not comparable.
        print(f"# WARNING {mode}: other jobs ran meanwhile: {sorted(strangers)}", flush=True)
    left: list[str] = []
    gone_s = None
    if provider is not None:
        if site.reports_leftovers:
            left, gone_s = close_and_check(provider, site, mode)
        else:
            provider.close()
        wait_until(site.machine_idle, 120)
    starts = {j.index: _start_of(run_dir / f"native-{j.index}") for j in natives}
    span = (t0, max(starts[j.index] + j.run_s for j in natives))
    busy = sum(
        j.nodes * _overlap(starts[j.index], starts[j.index] + j.run_s, span) for j in natives
    )
    idle = NODES * (span[1] - span[0]) - busy
    harvested = _block_node_seconds(run_dir, span)
    history = provider.history() if provider is not None else []
    result = RunResult(
        mode=mode,
        waits={i: starts[i] - submitted[i] for i in starts},
        idle_node_s=idle,
        harvested_node_s=harvested,
        yields=sum(r.cancel_reason is CancelReason.YIELD for r in history),
        preempted=sum(_preempted(r) for r in history),
        blocks=sum(r.start is not None for r in history),
    )
    if site.reports_leftovers:
        result.natives_done = site.natives_finished(ids)
        result.blocks_left = left
        result.gone_after_s = gone_s
        if provider is not None:
            nodes = site.native_nodes(ids, run_dir)
            grace = provider.profile.yield_grace_s
            result.block_waits = block_waits(history, natives, submitted, starts, nodes, grace)
            result.polls = provider.polls
            result.queries = sum(provider.scheduler.queries.values())
            result.yields_ahead = provider.faults["yields_ahead"]
    return result


def _start_of(path: Path) -> float:
    """A native's own start stamp (the first line of what it wrote)."""
    if not path.exists():
        raise RuntimeError(f"{path.name} never started: was it deleted by someone else?")
    return float(path.read_text().split()[0])


def _preempted(rec: JobRecord) -> bool:
    return rec.cancel_reason is None and "preempted" in rec.message


def _overlap(start: float, end: float, span: tuple[float, float]) -> float:
    return max(0.0, min(end, span[1]) - max(start, span[0]))


def _block_node_seconds(run_dir: Path, span: tuple[float, float]) -> float:
    total = 0.0
    for start_file in run_dir.glob("block-*.start"):
        end_file = start_file.with_suffix(".end")
        # The start, then (PBS) how many nodes the block's one worker stood for.
        start, *weight = start_file.read_text().split()
        end = float(end_file.read_text()) if end_file.exists() else span[1]
        total += int(weight[0] if weight else 1) * _overlap(float(start), end, span)
    return total


def report(results: list[RunResult], natives: list[Native], site: Site | None = None) -> None:
    site = site or SlurmSite()
    base, *rest = results
    noise = next((r for r in rest if r.mode == "baseline"), None)
    noise_max = 0.0
    rows = []
    for res in rest:
        delays = [res.waits[j.index] - base.waits[j.index] for j in natives]
        if res.mode == "baseline":
            noise_max = max(abs(d) for d in delays)
        rows.append((res, delays))
    print(f"native jobs: {len(natives)}; delays are waits minus the first baseline's waits")
    print(
        f"{'run':<10} {'mean delay s':>12} {'max delay s':>11} {'> noise':>8} "
        f"{'idle node-s':>11} {'harvested':>10} {'blocks':>7} {'yields':>7} {'preempted':>9}"
    )
    for res, delays in rows:
        over = sum(d > noise_max for d in delays) if res.mode != "baseline" else 0
        share = res.harvested_node_s / res.idle_node_s if res.idle_node_s > 0 else math.nan
        harvest = f"{share:.0%}" if res.mode != "baseline" else "-"
        print(
            f"{res.mode:<10} {sum(delays) / len(delays):>12.2f} {max(delays):>11.2f} "
            f"{over:>8d} {res.idle_node_s:>11.0f} {harvest:>10} {res.blocks:>7d} "
            f"{res.yields:>7d} {res.preempted:>9d}"
        )
    if noise is not None:
        print(f"{site.name}'s own noise (baseline vs baseline): max |delay| {noise_max:.2f} s")
        for res, delays in rows:
            if res.mode != "baseline":
                base_waits = [base.waits[j.index] for j in natives]
                print(describe_by_queueing(res.mode, delays, base_waits, noise_max))
    if site.reports_leftovers:
        report_leftovers(results, natives)


# A native that waited longer than this in the first baseline queued behind other natives: its
# start was the scheduler's to plan (from the limits), which a block must never push back.
QUEUED_S = 1.0


def describe_by_queueing(
    mode: str, delays: list[float], base_waits: list[float], noise_max: float
) -> str:
    """One line: the delays of natives that queued in the first baseline (their start was
    planned: the top job of a saturated queue) and of those that started at once (they arrived
    to a free node, which a block may hold until it is told to go)."""
    parts = []
    for label, keep in (("queued in the baseline", True), ("started at once there", False)):
        mine = [d for d, w in zip(delays, base_waits, strict=True) if (w > QUEUED_S) == keep]
        if mine:
            over = sum(d > noise_max for d in mine)
            parts.append(
                f"{label}: {len(mine)}, delay mean {statistics.mean(mine):+.2f} s, "
                f"max {max(mine):+.2f} s, {over} beyond the noise"
            )
        else:
            parts.append(f"{label}: 0")
    return f"{mode}: natives " + "; ".join(parts)


def report_leftovers(results: list[RunResult], natives: list[Native]) -> None:
    """Natives done, blocks left behind, waits for blocks, queries (printed for PBS)."""
    base = results[0]
    for res in results:
        line = f"{res.mode}: natives done {res.natives_done} of {len(natives)}"
        if res.gone_after_s is not None:
            left = ", ".join(res.blocks_left) if res.blocks_left else "none"
            line += (
                f"; block jobs left unfinished after close: {left} (all gone "
                f"{res.gone_after_s:.1f} s after close)"
            )
        if res.polls:
            line += f"; {res.polls} polls, {res.queries / res.polls:.1f} queries a poll"
            line += f"; yields ahead of a planned start: {res.yields_ahead}"
        print(line)
        if res.block_waits is not None:
            waits = res.block_waits
            waits.delays = [res.waits[i] - base.waits[i] for i in waits.jobs]
            print(describe_waits(res.mode, waits, len(natives)))
    left = sum(len(r.blocks_left) for r in results)
    print(f"block jobs of ours left behind: {left}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", choices=sorted(SITES), default="slurm")
    parser.add_argument("--jobs", type=int, default=26)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--slots", type=int, default=None, help="Parsl slots (max_blocks; default: the profile's)"
    )
    parser.add_argument("--out", help="also write every run's per-job waits to this JSON file")
    parser.add_argument(
        "--exact-limits",
        action="store_true",
        help=f"PBS: each native's walltime its run time + {EXACT_SLACK_S} s (default: whole "
        "minutes, 1-3), so the queue's starts are the ones the scheduler plans",
    )
    parser.add_argument(
        "--min-block-s",
        type=float,
        default=None,
        help="the profiles' min_block_s (shorter holes get blocks; with --exact-limits the "
        "holes are as short as the natives)",
    )
    parser.add_argument(
        "--modes",
        default=None,
        help="harvesting modes to run (default: poll,poll-watch,preempt on slurm, poll on pbs)",
    )
    args = parser.parse_args()
    if args.exact_limits and args.scheduler != "pbs":
        sys.exit("--exact-limits: PBS only (Slurm's time limits are whole minutes)")
    site = PBSSite(exact_limits=True) if args.exact_limits else SITES[args.scheduler]()
    if why := site.missing():
        sys.exit(why)
    extra = {} if args.min_block_s is None else {"min_block_s": args.min_block_s}
    natives = stream(args.jobs, args.seed)
    profiles = MODES_OF[args.scheduler]
    modes = [m for m in (args.modes or DEFAULT_MODES[args.scheduler]).split(",") if m]
    for mode in modes:
        if mode not in profiles:
            sys.exit(f"unknown mode {mode!r}; one of {', '.join(profiles)}")
    os.chdir(REPO)
    with tempfile.TemporaryDirectory(prefix="bench-live-harvest-") as tmp:
        results = []
        for mode in ["baseline", *modes, "baseline"]:
            began = time.monotonic()
            results.append(replay(mode, natives, Path(tmp), args.slots, site, extra))
            print(f"# {mode}: {time.monotonic() - began:.0f} s", flush=True)
        report(results, natives, site)
    if args.out:
        rows = [{"mode": r.mode, "waits": r.waits, "idle_node_s": r.idle_node_s,
                 "harvested_node_s": r.harvested_node_s} for r in results]  # fmt: skip
        if site.reports_leftovers:
            for row, r in zip(rows, results, strict=True):
                row.update(natives_done=r.natives_done, blocks_left=r.blocks_left,
                           blocks=r.blocks, yields=r.yields)  # fmt: skip
        Path(args.out).write_text(json.dumps({"natives": [vars(j) for j in natives], "runs": rows}))
    if any(r.blocks_left for r in results):
        sys.exit("block jobs of ours were left behind after close (cancelled since)")


if __name__ == "__main__":
    main()
