"""Run one scheduler command: argument list, timeout, bounded retries, one error type.

Every adapter goes through :func:`run_command`, so every failure reaches the caller as a
:class:`~parsl_malleable.errors.SchedulerCommandError` naming the command and what went wrong
(exit status and stderr excerpt, "timed out after N s", "not found on PATH"). Every attempt
is logged at debug (argv, seconds, exit status), as Parsl logs its own commands, and counted
in the caller's ``counter``: retries included, so the per-poll overhead is what really ran.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential

from parsl_malleable.errors import SchedulerCommandError

logger = logging.getLogger(__name__)

# Messages that mean "the controller/server was busy or briefly unreachable; try again".
# Anything else (a bad option, an unknown job, a rejected request) fails at once.
TRANSIENT_MARKERS = (
    "socket timed out",
    "unable to contact slurm controller",
    "slurm_receive_msg",
    "zero bytes were transmitted",
    "resource temporarily unavailable",
    "connection refused",
    "connection reset",
    "communication connection failure",
    "slurmctld is busy",
    "try again",
    "cannot connect to server",
    "pbs_iff",
    "server busy",
)
STDERR_EXCERPT = 400


@dataclass(frozen=True)
class CommandResult:
    """What a finished command printed. ``attempts`` counts retries too."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    attempts: int = 1


def is_transient(stderr: str) -> bool:
    """True when ``stderr`` looks like a passing controller/server outage."""
    low = stderr.lower()
    return any(marker in low for marker in TRANSIENT_MARKERS)


def run_command(
    argv: Sequence[str],
    *,
    timeout_s: float = 30.0,
    retries: int = 2,
    backoff_s: float = 0.5,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input_text: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    counter: Counter[str] | None = None,
    label: str | None = None,
) -> CommandResult:
    """Run ``argv`` (never through a shell) and return its output.

    A non-zero exit whose stderr is transient (:data:`TRANSIENT_MARKERS`) is retried up to
    ``retries`` times, waiting ``backoff_s``, then twice that, and so on. A command that runs
    past ``timeout_s`` is killed with its whole process group and NOT retried: a hung
    controller rarely recovers within one poll, and the caller's next poll retries anyway, so
    a hang costs at most ``timeout_s``. With ``check`` (default) any final non-zero exit raises
    :class:`SchedulerCommandError`; without it the result is returned for the caller to judge.
    ``env`` entries are added to (and override) the current environment, PATH included.
    Each attempt (a timed-out or missing command too) adds one to ``counter[label]``
    (``label`` defaults to the command's name).
    """
    argv = [str(a) for a in argv]
    if not argv:
        raise ValueError("run_command needs a non-empty argument list")
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    key = label or argv[0]

    def attempt() -> tuple[int, str, str]:
        if counter is not None:
            counter[key] += 1
        return _run_logged(argv, timeout_s, full_env, input_text)

    retrying = Retrying(
        stop=stop_after_attempt(max(0, retries) + 1),
        wait=wait_exponential(multiplier=backoff_s, min=0, max=float("inf")),
        retry=retry_if_result(lambda out: out[0] != 0 and is_transient(out[2])),
        sleep=sleep,
        # Out of retries: hand back the last failure for the check below, not a RetryError.
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        reraise=True,
    )
    returncode, stdout, stderr = retrying(attempt)
    attempts = retrying.statistics.get("attempt_number", 1)
    if check and returncode != 0:
        raise SchedulerCommandError(argv, describe_failure(returncode, stderr, attempts))
    return CommandResult(tuple(argv), returncode, stdout, stderr, attempts)


def _run_logged(
    argv: list[str], timeout_s: float, env: dict[str, str], input_text: str | None
) -> tuple[int, str, str]:
    started = time.monotonic()
    try:
        returncode, stdout, stderr = _run_once(argv, timeout_s, env, input_text)
    except SchedulerCommandError as exc:
        logger.debug(
            "ran %s in %.3f s: %s", shlex.join(argv), time.monotonic() - started, exc.reason
        )
        raise
    logger.debug(
        "ran %s in %.3f s: exit status %d%s",
        shlex.join(argv),
        time.monotonic() - started,
        returncode,
        f" ({' '.join(stderr.split())[:STDERR_EXCERPT]})" if returncode else "",
    )
    return returncode, stdout, stderr


def describe_failure(returncode: int, stderr: str, attempts: int = 1) -> str:
    """``exit status N: <stderr excerpt>`` (with the attempt count when it was retried)."""
    excerpt = " ".join(stderr.split())[:STDERR_EXCERPT] or "(no stderr)"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return f"exit status {returncode}{tries}: {excerpt}"


def _run_once(
    argv: list[str], timeout_s: float, env: dict[str, str], input_text: str | None
) -> tuple[int, str, str]:
    try:
        # A new session lets a timeout kill the command's children too: a wrapper script's
        # child holding the pipes open would otherwise block communicate() after the kill.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise SchedulerCommandError(argv, "command not found on PATH") from None
    except OSError as exc:
        raise SchedulerCommandError(argv, f"cannot start: {exc}") from exc
    try:
        stdout, stderr = proc.communicate(input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise SchedulerCommandError(argv, f"timed out after {timeout_s:g} s") from None
    return proc.returncode, stdout, stderr


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
