"""The flow shared by the batch systems driven by commands (Slurm, PBS).

Following dask-jobqueue's model, :class:`CommandScheduler` holds what every such scheduler
does: run and count each command, read a snapshot from a node query, a job query and a
reservation query, submit a block, read statuses (forgotten ids are UNKNOWN), cancel and
signal jobs that may be gone already. ``slurm.py`` and ``pbs.py`` state only what differs:
their commands, their parsers, their error words and their profile settings.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import re
import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.private_files import read_regular_file, write_private_bytes
from parsl_malleable.schedulers.base import OURS_PREFIX, BlockScheduler, Script, SiteDestination
from parsl_malleable.schedulers.commands import CommandResult, describe_failure, run_command
from parsl_malleable.schedulers.records import JobState, JobStatus, OutputParseError, parse_output
from parsl_malleable.snapshot import Reservation, Snapshot

Parser = Callable[[str], Any]
logger = logging.getLogger(__name__)
# Characters no submit option needs that only a shell would act on (quotes, expansions,
# redirections, separators): options are passed as arguments, never through a shell, so a
# quote would reach the scheduler as it is. Constraint syntax (``&``, ``|``, ``[]``, ``*``) is
# the scheduler's own and allowed.
SHELL_ONLY = frozenset("'\"`$;<>\\(){}")
# Marks the directive lines the scheduler writes into a block script.
OPTIONS_MARK = "# submit_options of the site profile (also given on the submit command line):"


class CommandScheduler(BlockScheduler):
    """A :class:`BlockScheduler` over a batch system's commands.

    A subclass states its queries (:meth:`nodes_argv`, :meth:`jobs_argv`,
    :meth:`reservations_argv`, the ``parse_*`` parsers and :meth:`build_snapshot`), its
    submission (:meth:`submit_argv`, :meth:`command_tail`, :attr:`parse_submitted`), its
    status, cancel and signal commands, and :attr:`GONE`, the error words meaning a job has
    ended already. Every command goes through :meth:`run`, which counts it in
    :attr:`queries`. Jobs whose name starts with ``ours_prefix`` are ``ours``.
    """

    #: stderr words (lower case) saying a job is finished or unknown: not an error to cancel.
    GONE: ClassVar[tuple[str, ...]] = ()
    #: stderr words (lower case) saying a status request named an id the scheduler forgot.
    UNKNOWN_JOB: ClassVar[tuple[str, ...]] = ()
    #: The block's output file next to its script, formatted with the block's ``name``.
    OUTPUT: ClassVar[str] = "{name}.out"
    #: What a job id printed by the submit command must look like (a cut-off or garbled id
    #: would track a job that is not ours).
    JOB_ID: ClassVar[re.Pattern[str]] = re.compile(r"\d+")
    #: The directive prefix of a batch script (``#SBATCH``, ``#PBS``).
    DIRECTIVE: ClassVar[str] = "#"
    submit_ids_printed = True

    def __init__(
        self,
        *,
        ours_prefix: str = OURS_PREFIX,
        reservations: bool = True,
        backfill: str = "conservative",
        account: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        submit_options: Sequence[str] = (),
    ) -> None:
        # Checked here too (not only in the profile): a scheduler may be built by hand.
        self.submit_options = tuple(" ".join(self.option_argv(o)) for o in submit_options)
        self.option_args = [a for o in self.submit_options for a in self.option_argv(o)]
        if self.submit_options:
            logger.info(
                "%s: every block and start test gets %s",
                type(self).__name__,
                " ".join(self.submit_options),
            )
        self.ours_prefix = ours_prefix
        self.reservations = reservations
        self.backfill = backfill
        self.account = account
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.env = dict(env or {})
        self.clock = clock
        self.queries: Counter[str] = Counter()

    @classmethod
    def from_profile(cls, profile: SiteDestination, env: Mapping[str, str] | None = None) -> Self:
        """The scheduler of a site profile: the settings all share, and :meth:`settings_of`."""
        return cls(
            account=profile.account,
            reservations=profile.reservations,
            timeout_s=profile.command_timeout_s,
            retries=profile.command_retries,
            env=env,
            submit_options=profile.submit_options,
            **cls.settings_of(profile),
        )

    @classmethod
    def settings_of(cls, profile: SiteDestination) -> dict[str, Any]:
        """This scheduler's own constructor arguments from a profile (its destination)."""
        return {}

    @classmethod
    def option_argv(cls, option: str) -> list[str]:
        """The arguments of one submit option, written as after a directive prefix
        (``--constraint=gpu``, ``-l filesystems=home:eagle``): the option and at most one
        value. Raises ValueError saying why when it is not one option, needs a shell, or is
        one the provider sets itself (:meth:`controlled_option` says which profile key to use).
        """
        if not isinstance(option, str):
            raise ValueError(f"{option!r} is not a string (one option per item)")
        bad = sorted(set(option) & SHELL_ONLY) + (["newline"] if "\n" in option else [])
        if bad or "\r" in option or "\0" in option:
            raise ValueError(
                f"{option!r}: {' '.join(bad) or 'control characters'} would need a shell; "
                "each item is passed as it is, without one (write it without quotes)"
            )
        words = option.split()
        if not words or not words[0].startswith("-") or words[0].strip("-") == "":
            raise ValueError(
                f"{option!r}: a submit option starts with '-' (e.g. --constraint=gpu), one per item"
            )
        if len(words) > 2 or (len(words) == 2 and words[1].startswith("-")):
            raise ValueError(
                f"{option!r}: one option (and its value) per item; put each option in an item "
                "of its own"
            )
        hint = cls.controlled_option(words)
        if hint:
            raise ValueError(f"{option!r}: the provider sets this itself; {hint}")
        return words

    @classmethod
    def controlled_option(cls, words: list[str]) -> str | None:
        """What to set instead when option ``words`` is one the provider sets on every block
        (its size, walltime, name, destination, output...); None when it is free to use."""
        return None

    def directive_lines(self) -> list[str]:
        """The profile's submit options as batch-script directive lines."""
        return [f"{self.DIRECTIVE} {o}" for o in self.submit_options]

    def record_options(self, script: Path) -> None:
        """Write the submit options as directive lines into the block script ``script``,
        after its first line, so the submitted script shows them (once: a script submitted
        again keeps one copy). The command line carries them too and is what counts, the
        same as for the start test, which submits no script."""
        if not self.submit_options:
            return
        # Read without following a link or waiting on a FIFO, and rewritten atomically as a new
        # file (a link planted under its name is replaced, never written through). The
        # provider writes its scripts with the lines already (block_script), so this is for a
        # script given by hand.
        data, _ = read_regular_file(script)
        lines = data.decode().splitlines(keepends=True)
        if OPTIONS_MARK + "\n" in lines:
            return
        head, rest = lines[:1], lines[1:]
        block = [OPTIONS_MARK + "\n", *(line + "\n" for line in self.directive_lines())]
        write_private_bytes(script, "".join([*head, *block, *rest]).encode())

    def run(
        self,
        argv: list[str],
        check: bool = True,
        label: str | None = None,
        retries: int | None = None,
    ) -> CommandResult:
        """Run one command of this scheduler, counted in :attr:`queries` under ``label``;
        ``retries`` overrides the profile's (a submit is never retried: see :meth:`submit`)."""
        return run_command(
            argv,
            timeout_s=self.timeout_s,
            retries=self.retries if retries is None else retries,
            backoff_s=self.backoff_s,
            env=self.env,
            check=check,
            counter=self.queries,
            label=label,
        )

    def block_name(self, job_name: str | None) -> str:
        """``job_name`` with :attr:`ours_prefix` in front (the prefix alone when None)."""
        name = job_name or self.ours_prefix
        if self.ours_prefix and not name.startswith(self.ours_prefix):
            name = f"{self.ours_prefix}-{name}"
        return name

    # ------------------------------------------------------------------ what differs

    @abstractmethod
    def nodes_argv(self) -> list[str]:
        """The node query of a snapshot (parsed by :attr:`parse_nodes`)."""

    @abstractmethod
    def jobs_argv(self) -> list[str]:
        """The job query of a snapshot (parsed by :attr:`parse_jobs`)."""

    @abstractmethod
    def reservations_argv(self) -> list[str]:
        """The reservation query (parsed by :attr:`parse_reservations`)."""

    # The parsers: a subclass binds each to its module's function with staticmethod().

    @staticmethod
    @abstractmethod
    def parse_nodes(text: str) -> Any:
        """The nodes in the output of :meth:`nodes_argv`."""

    @staticmethod
    @abstractmethod
    def parse_jobs(text: str) -> Any:
        """The jobs in the output of :meth:`jobs_argv`."""

    @staticmethod
    @abstractmethod
    def parse_reservations(text: str) -> list[Reservation]:
        """The reservations in the output of :meth:`reservations_argv`."""

    @staticmethod
    @abstractmethod
    def parse_submitted(stdout: str) -> str:
        """The job id in the submit command's output."""

    @abstractmethod
    def build_snapshot(
        self, now: float, nodes: Any, jobs: Any, reservations: list[Reservation]
    ) -> Snapshot:
        """The snapshot from the parsed queries."""

    @abstractmethod
    def submit_argv(
        self,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        job_name: str | None = None,
        output: str | None = None,
    ) -> list[str]:
        """The submit command for one whole-node block, without the script; a subclass adds
        its own keyword options (what :meth:`submit` passes on)."""

    @abstractmethod
    def command_tail(self, args: list[str]) -> contextlib.AbstractContextManager[list[str]]:
        """What follows the submit options to run the argument vector ``args``."""

    @abstractmethod
    def status_argv(self, job_ids: list[str]) -> list[str]:
        """The command that prints the state of these jobs."""

    @abstractmethod
    def read_statuses(self, argv: list[str], stdout: str) -> list[JobStatus]:
        """The statuses in the output of :meth:`status_argv`."""

    @abstractmethod
    def named_argv(self, name: str) -> list[str]:
        """The command that prints the ids of the jobs named ``name`` that have not ended,
        one per line (read by :meth:`jobs_named`)."""

    @abstractmethod
    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        """The command that ends these jobs."""

    @abstractmethod
    def signal_argv(self, job_ids: list[str], signal: str) -> list[str]:
        """The command that signals the batch shell of these jobs."""

    def short_id(self, job_id: str) -> str:
        """The part of an id the scheduler may print alone (PBS: the number)."""
        return job_id

    # ------------------------------------------------------------------ the common flow

    def snapshot(self) -> Snapshot:
        """Nodes, running and pending jobs (and reservations) now, in two or three queries."""
        nodes = self._query(self.nodes_argv(), self.parse_nodes)
        jobs = self._query(self.jobs_argv(), self.parse_jobs)
        # Read after the jobs: one that started while the queries ran has a start before it
        # (a clock read first made such a job start "after the snapshot", a refused poll).
        now = self.clock()
        reservations: list[Reservation] = []
        if self.reservations:
            reservations = self._query(self.reservations_argv(), self.parse_reservations)
        try:
            return self.build_snapshot(now, nodes, jobs, reservations)
        except OutputParseError as exc:
            raise SchedulerCommandError(self.jobs_argv(), f"inconsistent output: {exc}") from exc

    def _query(self, argv: list[str], parser: Parser) -> Any:
        return parse_output(argv, parser, self.run(argv).stdout)

    def submit(
        self,
        script: Script,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        name: str | None = None,
        output: str | None = None,
        **options: Any,
    ) -> str:
        """Submit a block; its job id. ``script`` is a batch script path or an argument
        vector run on the first node (never a shell string); the output goes next to a
        script path unless ``output`` says where. ``options``: the scheduler's own."""
        name = self.block_name(name)
        if isinstance(script, str | os.PathLike):
            if output is None:
                output = str(Path(script).parent / self.OUTPUT.format(name=name))
            self.record_options(Path(script))
        head = self.submit_argv(
            nodes=nodes,
            walltime_s=walltime_s,
            node_ids=node_ids,
            job_name=name,
            output=output,
            **options,
        )
        with self.script_tail(script) as tail:
            argv = [*head, *tail]
            # Never retried here: a submit that failed after the job was created (a socket
            # timeout on the reply) would create a second one. The provider looks the block's
            # name up instead (jobs_named) and adopts or cancels what it finds.
            job_id = parse_output(argv, self.parse_submitted, self.run(argv, retries=0).stdout)
        if not self.JOB_ID.fullmatch(job_id):
            raise SchedulerCommandError(argv, f"printed {job_id!r}, which is not a job id")
        return job_id

    def jobs_named(self, name: str) -> list[str]:
        """Ids of the jobs named ``name`` that have not ended, from one query."""
        argv = self.named_argv(name)
        ids = self.run(argv, label=f"{argv[0]} (by name)").stdout.split()
        bad = [i for i in ids if not self.JOB_ID.fullmatch(i)]
        if bad:
            raise SchedulerCommandError(argv, f"unparseable output: {bad[0]!r} is not a job id")
        return ids

    def script_tail(self, script: Script) -> contextlib.AbstractContextManager[list[str]]:
        """The submit command's end: the script path, or :meth:`command_tail` of an argv."""
        if isinstance(script, str | os.PathLike):
            return contextlib.nullcontext([os.fspath(script)])
        args = [str(a) for a in script]
        if not args:
            raise ValueError("submit needs a script path or a non-empty argument vector")
        return self.command_tail(args)

    #: One status query per job: a command that prints only the first of several jobs asked
    #: for (PBS's ``qstat -f -x -F json ID1 ID2``) would leave the others UNKNOWN.
    STATUS_ONE_JOB_PER_QUERY: ClassVar[bool] = False

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """State of each job; a job the scheduler has forgotten is UNKNOWN."""
        ids = [str(j) for j in job_ids]
        if not self.STATUS_ONE_JOB_PER_QUERY:
            return self._status_of(ids)
        return {j: s for one in ids for j, s in self._status_of([one]).items()}

    def _status_of(self, ids: list[str]) -> dict[str, JobStatus]:
        if not ids:
            return {}
        argv = self.status_argv(ids)
        result = self.run(argv, check=False)
        if result.returncode != 0 and not _every_line_says(result.stderr, self.UNKNOWN_JOB):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))
        found = {}
        if result.stdout.strip():
            found = {s.job_id: s for s in self.read_statuses(argv, result.stdout)}
        by_short = {self.short_id(j): s for j, s in found.items()}
        return {
            j: found.get(j) or by_short.get(self.short_id(j)) or JobStatus(j, JobState.UNKNOWN)
            for j in ids
        }

    def cancel(self, job_ids: Sequence[str]) -> None:
        """End the jobs; cancelling a job that already ended is not an error."""
        ids = [str(j) for j in job_ids]
        if ids:
            self._run_tolerating_gone(self.cancel_argv(ids))

    def cancel_hint(self, job_ids: Sequence[str]) -> list[str]:
        """The cancel command itself (``scancel ...``, ``qdel ...``)."""
        return self.cancel_argv([str(j) for j in job_ids])

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        """Send ``signal`` to the batch shell of each job; a job gone already is fine."""
        ids = [str(j) for j in job_ids]
        if ids:
            self._run_tolerating_gone(self.signal_argv(ids, signal))

    def _run_tolerating_gone(self, argv: list[str]) -> str:
        """Run ``argv``; an error that only says jobs are gone is fine. Its stderr."""
        result = self.run(argv, check=False)
        if result.returncode != 0 and not _every_line_says(result.stderr, self.GONE):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))
        return result.stderr


def current_user() -> str:
    """The login name of this process's user (from its uid, not from ``$USER``), whose jobs
    a lookup by name is limited to."""
    return pwd.getpwuid(os.getuid()).pw_name


def _every_line_says(stderr: str, words: tuple[str, ...]) -> bool:
    """True when stderr has lines and each contains one of ``words``."""
    lines = [ln.lower() for ln in stderr.splitlines() if ln.strip()]
    return bool(lines) and all(any(w in ln for w in words) for ln in lines)


__all__ = ["OPTIONS_MARK", "SHELL_ONLY", "CommandScheduler", "Parser", "current_user"]
