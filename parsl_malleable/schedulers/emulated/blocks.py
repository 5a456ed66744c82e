"""The processes of one emulated block: one wrapped batch shell per virtual node.

Each node's share runs under :mod:`.node_wrapper` in a session of its own, so a walltime or
cancel can TERM (then KILL, ``kill_grace_s`` later) the whole group of that node, while a signal
for the batch shell goes to the wrapper, which passes it on to the shell only. When the driver
dies, the wrappers end their groups themselves: TERM, then KILL once the group is empty or
after :data:`~.node_wrapper.DRIVER_LOSS_GRACE_S`, so ranks can write their last checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from parsl_malleable.schedulers.records import JobState, JobStatus
from parsl_malleable.watchdog import SAFE_PATH_ENV, isolated_environment

WRAPPER = Path(__file__).with_name("node_wrapper.py")


@dataclass
class EmulatedBlock:
    """A block of ours on the emulated site and its per-node processes (``node -> Popen``)."""

    job_id: str
    name: str
    nodes: tuple[str, ...]
    start: float
    walltime_s: float
    ours: bool
    state: JobState = JobState.RUNNING
    end: float | None = None
    reason: str = ""
    usr1_at: float | None = None
    kill_at: float | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    outputs: dict[str, Path] = field(default_factory=dict)

    @property
    def deadline(self) -> float:
        """When the walltime runs out."""
        return self.start + self.walltime_s

    @property
    def running(self) -> bool:
        """Holding its nodes (not yet ended)."""
        return self.state is JobState.RUNNING

    def launch(
        self, script: Path, lifeline: int, env: Mapping[str, str], argv: Sequence[str] = ()
    ) -> None:
        """Start the batch script once per node: ``bash script`` (or ``argv``) under the
        wrapper, with ``PM_NODE_NAME`` and ``PM_BLOCK_JOB_ID``; output beside the script.

        Each node's processes run in the script's folder (the run's private block folder),
        never in the driver's working folder, which may be a shared one, and no Python
        process among them imports from its working folder (``PYTHONSAFEPATH``; issue 49)."""
        script = script.resolve()  # it is run from its own folder
        command = list(argv) or ["/bin/bash", str(script)]
        # Every output opened before any node starts, never through a link planted under its
        # name (root would append to its target): a refused one starts nothing to track.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        sinks: dict[str, int] = {}
        try:
            for node in self.nodes:
                out = script.parent / f"{self.name}-{self.job_id}.{node}.out"
                sinks[node] = os.open(out, flags, 0o600)
                self.outputs[node] = out
            for node in self.nodes:
                node_env = {
                    **isolated_environment(),
                    **env,
                    SAFE_PATH_ENV: "1",
                    "PM_NODE_NAME": node,
                    "PM_BLOCK_JOB_ID": self.job_id,
                }
                self.procs[node] = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(WRAPPER), str(lifeline), "--", *command],
                    stdin=subprocess.DEVNULL,
                    stdout=sinks[node],
                    stderr=subprocess.STDOUT,
                    env=node_env,
                    cwd=script.parent,
                    start_new_session=True,
                    pass_fds=(lifeline,),
                )
        finally:
            for fd in sinks.values():
                os.close(fd)

    def exit_codes(self) -> dict[str, int | None]:
        """Each node's wrapper exit status (None while it runs); reaps finished ones."""
        return {node: proc.poll() for node, proc in self.procs.items()}

    def signal_shells(self, signum: int) -> int:
        """Send ``signum`` to each node's batch shell (through its wrapper); how many got it."""
        sent = 0
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    proc.send_signal(signum)
                    sent += 1
                except ProcessLookupError:
                    pass
        return sent

    def signal_groups(self, signum: int) -> None:
        """Send ``signum`` to every process of every node (each node's process group)."""
        # The group id is the wrapper's pid (its own session); a group outlives its leader
        # while any member lives, and its id is not reused until it is empty.
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)

    def finish(self, state: JobState, at: float, reason: str, kill_at: float | None) -> None:
        """End the block: its nodes are free from ``at``; TERM now and KILL at ``kill_at``."""
        self.state = state
        self.end = at
        self.reason = reason
        self.usr1_at = None
        if any(code is None for code in self.exit_codes().values()):
            self.signal_groups(signal.SIGTERM)
            self.kill_at = kill_at
        else:
            self.signal_groups(signal.SIGKILL)  # stragglers the shells left behind

    def status(self) -> JobStatus:
        """The block as :class:`JobStatus` (``end_limit``: the deadline, or the actual end)."""
        return JobStatus(
            job_id=self.job_id,
            state=self.state,
            raw_state=self.state.value,
            reason=self.reason,
            nodes=self.nodes,
            start=self.start,
            end_limit=self.deadline if self.end is None else self.end,
        )


__all__ = ["WRAPPER", "EmulatedBlock"]
