"""What the driver's watchdog must clean up for one Parsl executor, whatever its provider.

The controller calls :func:`track_executor` at each tick, so the watchdog
(:mod:`parsl_malleable.watchdog`) always knows the executor's interchange and its blocks: the
process groups of a ``LocalProvider``'s blocks (the quick start of docs/elastic.md), the scheduler
jobs of a ``BackfillProvider`` or of Parsl's batch providers with the command that cancels them.
Killing the interchange alone would not do: a worker pool waits ``heartbeat_threshold`` (120 s by
default) before it gives up on a silent interchange.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from parsl_malleable.watchdog import Watchdog

# Parsl's batch providers by class name, and the command that cancels their jobs.
CANCEL_ARGV: dict[str, list[str]] = {
    "SlurmProvider": ["scancel"],
    "PBSProProvider": ["qdel"],
    "TorqueProvider": ["qdel"],
    "GridEngineProvider": ["qdel"],
    "LSFProvider": ["bkill"],
    "CondorProvider": ["condor_rm"],
}
# A BackfillProvider's scheduler (its site profile's ``scheduler``), and the same.
SCHEDULER_CANCEL_ARGV: dict[str, list[str]] = {"slurm": ["scancel"], "pbs": ["qdel"]}


def _local_groups(provider: Any) -> list[int]:
    """The process groups of a LocalProvider's live blocks (it starts each in its own group)."""
    groups = []
    for record in list(getattr(provider, "resources", {}).values()):
        pid = record.get("remote_pid") if isinstance(record, dict) else None
        if not isinstance(pid, int) or record.get("cancelled"):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.append(os.getpgid(pid))
    return groups


def _scheduler_jobs(provider: Any) -> tuple[list[str], list[str]]:
    """The cancel command and the job ids of a batch provider's blocks ([] when unknown)."""
    blocks = getattr(provider, "blocks", None)
    profile = getattr(provider, "profile", None)
    if callable(blocks) and profile is not None:  # a BackfillProvider
        argv = SCHEDULER_CANCEL_ARGV.get(getattr(profile, "scheduler", ""), [])
        # An id no lookup has confirmed may be another job's: never cancel it blind.
        return argv, [str(b.job_id) for b in blocks() if getattr(b, "id_checked", True)]
    argv = CANCEL_ARGV.get(type(provider).__name__, [])
    resources = getattr(provider, "resources", {})
    ids = [
        str(job_id)
        for job_id, record in list(resources.items())
        if not (isinstance(record, dict) and record.get("cancelled"))
    ]
    return argv, ids


def track_executor(watchdog: Watchdog, executor: Any) -> None:
    """Tell ``watchdog`` what to stop of ``executor`` if the driver dies: its interchange and
    its provider's blocks, as they are now."""
    proc = getattr(executor, "interchange_proc", None)
    if proc is not None and proc.poll() is None:
        watchdog.watch_process(proc.pid)
    provider = getattr(executor, "provider", None)
    if provider is None:
        return
    key = str(getattr(executor, "label", id(executor)))
    if type(provider).__name__ == "LocalProvider":
        watchdog.set_groups(key, _local_groups(provider))
        return
    argv, ids = _scheduler_jobs(provider)
    if argv:
        watchdog.set_jobs(key, argv, ids)


__all__ = ["CANCEL_ARGV", "SCHEDULER_CANCEL_ARGV", "track_executor"]
