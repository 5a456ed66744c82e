"""The few scheduler operations the provider needs, over the Slurm and PBS adapters
(and the emulated site, :class:`~parsl_malleable.schedulers.emulated.EmulatedSite`).

:class:`BlockScheduler` is what :class:`~parsl_malleable.provider.BackfillProvider` talks to.
:class:`SlurmBlocks` and :class:`PBSBlocks` put the site profile's destination (partition, QOS,
queue, account, node pinning, signal margin) on the adapters of
:mod:`parsl_malleable.schedulers`, and add what those do not offer: a start test pinned to the
planned nodes and a signal to the batch shell only (``scancel --signal --full`` would also hit
the worker pools, which Parsl does not let handle USR1). Every instance counts the scheduler
commands it runs, so the overhead per poll can be reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from parsl_malleable.errors import ConfigError, SchedulerCommandError, StartRefused
from parsl_malleable.harvest.profile import SiteProfile
from parsl_malleable.schedulers.commands import run_command
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.records import JobStatus, OutputParseError
from parsl_malleable.schedulers.slurm import SlurmScheduler
from parsl_malleable.schedulers.slurm_parse import parse_test_only
from parsl_malleable.snapshot import Snapshot

OURS_PREFIX = "pm-block"


class BlockScheduler(Protocol):
    """Snapshot, start test, submit, status, cancel and signal for whole-node blocks."""

    queries: Counter[str]

    def snapshot(self) -> Snapshot: ...

    def test_start(self, nodes: int, walltime_s: float, node_ids: Sequence[str]) -> float | None:
        """When a block would start, or None when the scheduler cannot say; raises
        :class:`~parsl_malleable.errors.StartRefused` with the scheduler's words when it
        refuses the block outright."""
        ...

    def submit(
        self, script: Path, *, nodes: int, walltime_s: float, node_ids: Sequence[str], name: str
    ) -> str: ...

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]: ...

    def cancel(self, job_ids: Sequence[str]) -> None: ...

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None: ...


class SlurmBlocks:
    """:class:`BlockScheduler` on a :class:`SlurmScheduler` (which reads every partition)."""

    def __init__(
        self,
        profile: SiteProfile,
        scheduler: SlurmScheduler | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.profile = profile
        self.sched = scheduler or SlurmScheduler(
            reservations=profile.reservations,
            ours_prefix=OURS_PREFIX,
            timeout_s=profile.command_timeout_s,
            retries=profile.command_retries,
            env=env,
        )
        self.queries: Counter[str] = Counter()

    def snapshot(self) -> Snapshot:
        self.queries["sinfo"] += 1
        self.queries["squeue"] += 1
        if self.sched.reservations:
            self.queries["scontrol"] += 1
        return self.sched.snapshot()

    def _extra(self, node_ids: Sequence[str]) -> list[str]:
        extra = []
        if self.profile.account:
            extra.append(f"--account={self.profile.account}")
        if self.profile.pin_nodes and node_ids:
            extra.append(f"--nodelist={','.join(node_ids)}")
        return extra

    def test_start(self, nodes: int, walltime_s: float, node_ids: Sequence[str]) -> float | None:
        argv = self.sched.submit_argv(
            nodes=nodes,
            walltime_s=walltime_s,
            partition=self.profile.partition,
            qos=self.profile.qos,
            extra_args=self._extra(node_ids),
        )
        argv = [a for a in argv if a != "--parsable" and not a.startswith("--job-name")]
        argv[1:1] = ["--test-only"]
        argv += ["--wrap", "true"]
        self.queries["sbatch --test-only"] += 1
        result = run_command(
            argv,
            timeout_s=self.sched.timeout_s,
            retries=self.sched.retries,
            env=self.sched.env,
            check=False,
        )
        if result.returncode != 0:
            words = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
            raise StartRefused(argv, words)
        try:
            start, _hosts, _partition = parse_test_only(result.stderr)
        except OutputParseError as exc:
            raise SchedulerCommandError(argv, f"unparseable output: {exc}") from exc
        return start

    def submit(
        self, script: Path, *, nodes: int, walltime_s: float, node_ids: Sequence[str], name: str
    ) -> str:
        self.queries["sbatch"] += 1
        return self.sched.submit(
            script,
            nodes=nodes,
            walltime_s=walltime_s,
            partition=self.profile.partition,
            qos=self.profile.qos,
            job_name=name,
            signal_margin_s=self.profile.signal_margin_s or None,
            output=str(script.parent / f"{name}-%j.out"),
            extra_args=self._extra(node_ids),
        )

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.queries["squeue"] += 1
        return self.sched.status(job_ids)

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.queries["scancel"] += 1
        self.sched.cancel(job_ids)

    def preempted(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these (ended) jobs Slurm preempted: its PreemptTime is set. A preempted
        block whose workers left within the grace time ends FAILED or COMPLETED, not
        PREEMPTED, so its state alone does not say."""
        argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}",
                "--Format=JobID:32,PreemptTime:32"]  # fmt: skip
        self.queries["squeue"] += 1
        result = run_command(
            argv, timeout_s=self.sched.timeout_s, retries=self.sched.retries, env=self.sched.env
        )
        out = set()
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] not in ("N/A", "None", "Unknown", "0"):
                out.add(parts[0])
        return out

    def queue_signature(self) -> frozenset[tuple[str, str]]:
        """Native jobs pending or running now, as (id, PD|R): one small ``squeue``, so the
        provider can see an arrival or an end between polls."""
        argv = ["squeue", "--noheader", "--states=PD,CF,R,S", "--format=%i %t %j"]
        self.queries["squeue (watch)"] += 1
        result = run_command(
            argv, timeout_s=self.sched.timeout_s, retries=self.sched.retries, env=self.sched.env
        )
        return queue_signature_of(result.stdout)

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        argv = ["scancel", "--batch", f"--signal={signal}", *job_ids]
        self.queries["scancel"] += 1
        result = run_command(
            argv,
            timeout_s=self.sched.timeout_s,
            retries=self.sched.retries,
            env=self.sched.env,
            check=False,
        )
        if result.returncode != 0 and "already completing" not in result.stderr.lower():
            # A block that ended meanwhile cannot be signalled; the cancel that follows is
            # what matters, so this is only worth a log line at the caller.
            raise SchedulerCommandError(argv, result.stderr.strip() or "signal failed")


def queue_signature_of(squeue_output: str) -> frozenset[tuple[str, str]]:
    """(id, PD|R) of every native job in ``squeue --format='%i %t %j'`` output."""
    out = set()
    for line in squeue_output.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) < 2 or (len(parts) == 3 and parts[2].startswith(OURS_PREFIX)):
            continue
        out.add((parts[0], "PD" if parts[1] == "PD" else "R"))
    return frozenset(out)


def snapshot_signature(snapshot: Snapshot) -> frozenset[tuple[str, str]]:
    """The same signature from a snapshot, to compare the first watch after a poll with."""
    running = {(j.job_id, "R") for j in snapshot.running if not j.ours}
    pending = {(j.job_id, "PD") for j in snapshot.pending if not j.ours}
    return frozenset(running | pending)


class PBSBlocks:
    """:class:`BlockScheduler` on a :class:`PBSScheduler`. PBS has no ``--test-only`` and
    no signal before the walltime: blocks watch ``PM_BLOCK_DEADLINE`` themselves."""

    def __init__(
        self,
        profile: SiteProfile,
        scheduler: PBSScheduler | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.profile = profile
        self.sched = scheduler or PBSScheduler(
            queue=profile.queue,
            reservations=profile.reservations,
            ours_prefix=OURS_PREFIX,
            timeout_s=profile.command_timeout_s,
            retries=profile.command_retries,
            env=env,
        )
        self.queries: Counter[str] = Counter()

    def snapshot(self) -> Snapshot:
        self.queries["pbsnodes"] += 1
        self.queries["qstat"] += 1
        if self.sched.reservations:
            self.queries["pbs_rstat"] += 1
        return self.sched.snapshot()

    def test_start(self, nodes: int, walltime_s: float, node_ids: Sequence[str]) -> float | None:
        return None

    def submit(
        self, script: Path, *, nodes: int, walltime_s: float, node_ids: Sequence[str], name: str
    ) -> str:
        extra = ["-A", self.profile.account] if self.profile.account else []
        self.queries["qsub"] += 1
        return self.sched.submit(
            script,
            nodes=nodes,
            walltime_s=walltime_s,
            queue=self.profile.queue,
            job_name=name,
            output=str(script.parent / f"{name}.out"),
            extra_args=extra,
        )

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self.queries["qstat"] += 1
        return self.sched.status(job_ids)

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.queries["qdel"] += 1
        self.sched.cancel(job_ids)

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        self.queries["qsig"] += 1
        self.sched.cancel(job_ids, signal=signal)


def make_scheduler(profile: SiteProfile, env: Mapping[str, str] | None = None) -> BlockScheduler:
    """The :class:`BlockScheduler` for ``profile.scheduler``; ``env`` is added to every
    command's environment (``SLURM_CONF``, a ``PATH`` with wrappers...)."""
    if profile.scheduler == "pbs":
        return PBSBlocks(profile, env=env)
    if profile.scheduler == "emulated":
        return make_emulated_site(profile, env)
    return SlurmBlocks(profile, env=env)


def make_emulated_site(profile: SiteProfile, env: Mapping[str, str] | None = None) -> EmulatedSite:
    """The emulated site of ``profile.emulated`` (simulates its native load first), with the
    profile's signal margin and node pinning; ``env`` is added to every block's environment."""
    if profile.emulated is None:
        raise ConfigError(f"{profile.name}: emulated: required with scheduler: emulated")
    return EmulatedSite(
        profile.emulated,
        signal_margin_s=profile.signal_margin_s,
        pin_nodes=profile.pin_nodes,
        env=env,
        ours_prefix=OURS_PREFIX,
    )


__all__ = [
    "OURS_PREFIX",
    "BlockScheduler",
    "PBSBlocks",
    "SlurmBlocks",
    "make_emulated_site",
    "make_scheduler",
    "queue_signature_of",
    "snapshot_signature",
]
