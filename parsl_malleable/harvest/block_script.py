"""The batch script of a block: one copy of Parsl's worker command per node, and the deadline.

Parsl gives the provider one shell command (HTEX's ``process_worker_pool.py ...``) meant to run
once per node. A block has k nodes, decided at submit time, so the script starts the command
with ``srun --ntasks-per-node=1 --nodes=$SLURM_JOB_NUM_NODES`` (``launcher: srun``) or once
(``launcher: none``). Parsl's command is written to its own file and run by ``bash``: it is
a shell command by Parsl's contract, and nothing else is spliced into shell text except quoted
paths and numbers. Without a scheduler option for it (PBS), the script sends itself USR1
``signal_margin_s`` before its walltime. The script exports ``PM_BLOCK_DEADLINE`` (Unix
seconds) and ``PM_BLOCK_SIGNAL_FILE`` (created when USR1 arrives before the walltime) for the
ranks, and keeps waiting for the workers after the signal so they can checkpoint.

SIGURG means the same as USR1 here. PBS's ``qsig`` signals every process of a job, and USR1
ends every process that does not catch it: the login shell that runs this script (PBS then
ends the job and kills what is left) and the worker pools. SIGURG is ignored by every process
that does not ask for it, so ``PBSScheduler`` sends the provider's yield notice as SIGURG and
only this script hears it. A SIGTERM to the batch shell (Slurm's notice to a preempted block,
or a cancel) is waited through the same way: the workers get it too, and the job ends when
they do or when the scheduler kills them (PBS: at once, when its login shell dies of it).

The dead-man switch: with ``heartbeat_file``, a watchdog beside the workers on every node
checks the file's modification time every few seconds; the driver's provider touches it while
it lives. When it is older than ``driver_timeout_s`` (driver killed or done, its host or the
shared file system lost), the watchdog ends its node's processes, so the block ends by itself
even when nothing is left to cancel it (Parsl's interchange can outlive a killed driver and keep
its workers busy), and even when its batch script is gone (:data:`NODE_SCRIPT`).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from parsl_malleable.private_files import PrivateFolder
from parsl_malleable.schedulers.command_scheduler import OPTIONS_MARK

SCRIPT = """#!/bin/bash
# parsl-malleable block for Parsl block {block_id} (slot {slot_id}); generated, do not edit.
# The scheduler keeps this script from the submit on, but the node script and Parsl's command
# are read from the block folder when the job starts: only from a folder that is still this
# user's alone, so that nothing another user put in its place is run.
pm_mode=$(stat -c %a {signal_dir_q}) || exit 1
if [ -L {signal_dir_q} ] || [ ! -O {signal_dir_q} ] || (( 8#$pm_mode & 8#022 )); then
    echo "parsl-malleable: the block folder "{signal_dir_q}" is not this user's alone" \
        "(mode $pm_mode): it was replaced since the submit; nothing is run" >&2
    exit 1
fi
{worker_init}
export PM_BLOCK_ID={block_id_q}
export PM_BLOCK_WALLTIME_S={walltime}
export PM_BLOCK_DEADLINE=$(( $(date +%s) + {walltime} ))
export PM_BLOCK_SIGNAL_FILE={signal_dir_q}/usr1-${{SLURM_JOB_ID:-${{PBS_JOBID:-$$}}}}
trap ': > "$PM_BLOCK_SIGNAL_FILE"' USR1 URG
trap ': > "$PM_BLOCK_SIGNAL_FILE.term"' TERM
{launch} /bin/bash {node_q} &
child=$!
{self_signal}# wait returns early on a signal: wait on until the workers are done.
while :; do
    wait "$child"
    status=$?
    kill -0 "$child" 2>/dev/null || break
done
[ -n "${{timer:-}}" ] && kill "$timer" 2>/dev/null
exit "$status"
"""

# What runs on each node (srun starts one copy per node, each its own process group): Parsl's
# command and, with a heartbeat file, the node's own dead-man switch. It sits on the node, not
# in the batch script, because the batch script can die while the workers live on: Slurm kills
# only the batch step of a job it ended while a node was unreachable, once the node is back,
# and leaves the node's job step running (seen on the test cluster of real hosts).
NODE_SCRIPT = """#!/bin/bash
# parsl-malleable: block {block_id} (slot {slot_id}) on one node; generated, do not edit.
# A SIGTERM (a cancel, a preemption's notice) reaches the workers too: wait for them.
trap : TERM
/bin/bash {command_q} &
worker=$!
{watchdog}while :; do
    wait "$worker"
    status=$?
    kill -0 "$worker" 2>/dev/null || break
done
# The watchdog and its sleep, at once: a step lasts while any of its processes does.
[ -n "${{watchdog:-}}" ] && {{ pkill -KILL -P "$watchdog"; kill -KILL "$watchdog"; }} 2>/dev/null
exit "$status"
"""

# The watchdog's check period; the block ends at most this much after the timeout.
WATCHDOG_PERIOD_S = 5

LAUNCHERS = {
    "srun": 'srun --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES" --kill-on-bad-exit=0',
    "none": "",
}


def driver_interpreter_first() -> str:
    """The shell line a block runs when the profile sets no ``worker_init``: the driver's own
    interpreter's folder first on ``PATH``. Slurm gives a job the submitter's environment, but
    PBS gives it a login one, where Parsl's ``process_worker_pool.py`` is then not found (exit
    127, every block FAILED); on a site whose compute nodes see the driver's environment (a
    shared filesystem) this is all a block needs."""
    return f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH"


def write_block_files(
    directory: Path | PrivateFolder,
    *,
    slot_id: str,
    block_id: str,
    command: str,
    walltime_s: float,
    launcher: str,
    worker_init: str = "",
    self_signal_s: float | None = None,
    heartbeat_file: Path | None = None,
    driver_timeout_s: float = 30.0,
    directives: Sequence[str] = (),
) -> Path:
    """Write ``<slot>.command`` (Parsl's command), ``<slot>.node`` (what runs on each node:
    the command and the dead-man switch) and ``<slot>-<walltime>.sh`` (the batch script) into
    ``directory`` and return the script's path. The files are reused by every job of the slot.

    ``directory``: a :class:`~parsl_malleable.private_files.PrivateFolder` the caller opened
    when it checked the folder, or a path, then checked and opened here (created private).
    Each file is written through the folder's descriptor (``O_EXCL | O_NOFOLLOW``, renamed
    into place), so a folder renamed or replaced after its check cannot receive them; the
    script's path is returned only while it still names that folder
    (:class:`~parsl_malleable.errors.UnsafePathError` otherwise: bash and the scheduler open
    these files by name).

    ``self_signal_s``: the script sends itself USR1 that long before its walltime, for
    schedulers without a signal-before-the-end option (PBS); Slurm's ``--signal`` does it there.
    ``heartbeat_file``: the dead-man switch's file (None: no switch); the block ends when it is
    older than ``driver_timeout_s``. ``worker_init`` "" runs :func:`driver_interpreter_first`.
    ``directives``: the scheduler's directive lines for the submit options, written after the
    first line under :data:`~parsl_malleable.schedulers.command_scheduler.OPTIONS_MARK` (the
    scheduler then has nothing to add to the script).
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if isinstance(directory, PrivateFolder):
        folder, opened = directory, False
    else:
        folder, opened = PrivateFolder(directory, what="block script folder"), True
    try:
        return _write(
            folder,
            slot_id=slot_id,
            block_id=block_id,
            command=command,
            walltime_s=walltime_s,
            launcher=launcher,
            worker_init=worker_init,
            self_signal_s=self_signal_s,
            heartbeat_file=heartbeat_file,
            driver_timeout_s=driver_timeout_s,
            directives=directives,
        )
    finally:
        if opened:
            folder.close()


def _write(
    folder: PrivateFolder,
    *,
    slot_id: str,
    block_id: str,
    command: str,
    walltime_s: float,
    launcher: str,
    worker_init: str,
    self_signal_s: float | None,
    heartbeat_file: Path | None,
    driver_timeout_s: float,
    directives: Sequence[str],
) -> Path:
    command_file = folder.write_text(f"{slot_id}.command", command.rstrip("\n") + "\n")
    node_file = folder.write_text(
        f"{slot_id}.node",
        NODE_SCRIPT.format(
            block_id=block_id,
            slot_id=slot_id,
            command_q=shlex.quote(str(command_file)),
            watchdog=_watchdog(heartbeat_file, driver_timeout_s),
        ),
    )
    text = SCRIPT.format(
        block_id=block_id,
        slot_id=slot_id,
        block_id_q=shlex.quote(block_id),
        worker_init=worker_init or driver_interpreter_first(),
        walltime=int(walltime_s),
        signal_dir_q=shlex.quote(str(folder.path)),
        launch=LAUNCHERS[launcher],
        node_q=shlex.quote(str(node_file)),
        self_signal=_self_signal(walltime_s, self_signal_s),
    )
    if directives:
        # Right after the interpreter line, before any command: where qsub and sbatch read them.
        first, rest = text.split("\n", 1)
        text = "\n".join([first, OPTIONS_MARK, *directives, rest])
    script = folder.write_text(f"{slot_id}-{int(walltime_s)}.sh", text, mode=0o700)
    # bash and the scheduler open these files by name: only while the name is still the folder
    # written to.
    folder.check_in_place()
    return script


def _self_signal(walltime_s: float, margin_s: float | None) -> str:
    if not margin_s or margin_s <= 0:
        return ""
    delay = max(0, int(walltime_s - margin_s))
    # A timer in the background that signals this batch shell only; stopped when the workers
    # are done, so it can never signal a later process that reuses the pid.
    return f"(sleep {delay} && kill -USR1 $$) >/dev/null 2>&1 &\ntimer=$!\n"


def _watchdog(heartbeat_file: Path | None, timeout_s: float) -> str:
    if heartbeat_file is None:
        return ""
    beat = shlex.quote(str(heartbeat_file.resolve()))
    timeout = max(1, int(timeout_s))
    # TERM to this node's whole process group first (the watchdog itself ignoring it only
    # then: a scancel's TERM must end it at once), so that ranks can leave (the node script
    # waits through it), then KILL: the worker command, Parsl's pool, its workers and
    # ranks, the node script and this watchdog. The job then ends, and the scheduler removes
    # whatever is left of it.
    return (
        "(\n"
        f"    while sleep {WATCHDOG_PERIOD_S}; do\n"
        '        kill -0 "$worker" 2>/dev/null || exit 0\n'
        f"        beat=$(stat -c %Y {beat} 2>/dev/null || echo 0)\n"
        f"        if [ $(( $(date +%s) - beat )) -gt {timeout} ]; then\n"
        f"            echo \"parsl-malleable: the driver's heartbeat {beat} is older than "
        f'{timeout} s: the block ends" >&2\n'
        "            trap '' TERM\n"
        "            kill -TERM 0 2>/dev/null\n"
        "            sleep 2\n"
        "            kill -KILL 0\n"
        "        fi\n"
        "    done\n"
        ") &\n"
        "watchdog=$!\n"
    )


__all__ = ["LAUNCHERS", "NODE_SCRIPT", "WATCHDOG_PERIOD_S", "write_block_files"]
