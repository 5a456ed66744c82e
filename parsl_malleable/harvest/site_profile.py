"""Site profiles: the per-machine settings of :class:`~parsl_malleable.provider.BackfillProvider`.

A profile is a small YAML file (``providers/<site>.yaml``) that a site's administrators or
users write once: where blocks go (partition, QOS, queue), how careful they are (safety and
signal margins), how often the provider looks (poll interval) and how much it may take (cap on
harvested nodes, block sizes). Unknown keys and bad values are errors that name the file and
the key, because a typo in a harvesting profile silently changes what a site lends.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import InputModel, load_yaml_file
from parsl_malleable.schedulers.command_scheduler import CommandScheduler
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.slurm import SlurmScheduler

# The shipped profiles: in a wheel, the package parsl_malleable.site_profiles (pyproject.toml maps
# it to providers/); in a checkout or an editable install, providers/ itself.
SHIPPED_PROFILES = Path(__file__).resolve().parents[1] / "site_profiles"
REPO_PROFILES = Path(__file__).resolve().parents[2] / "providers"
PROFILE_PATH_ENV = "PM_PROVIDER_PROFILES"
# The user's own profiles: $XDG_CONFIG_HOME/parsl-malleable/sites (~/.config/... by default).
USER_PROFILES = Path("parsl-malleable") / "sites"
PROFILE_SUFFIXES = (".yaml", ".yml")
# The schedulers whose submit options a profile may set, and who checks them.
OPTION_CHECKERS: dict[str, type[CommandScheduler]] = {
    "slurm": SlurmScheduler,
    "pbs": PBSScheduler,
}
# ``min_block_s: auto``: a block lasts at least this many start-ups, so that it trains at least
# 1 - 1/AUTO_STARTUPS of its walltime.
AUTO_STARTUPS = 4
# The start-up ``auto`` assumes, by default, until the controller has measured one.
DEFAULT_STARTUP_S = 30.0


# Keys renamed since 0.1.0 (old -> new). ``heartbeat_timeout_s`` also named a rank's liveness
# timeout towards its coordinator, a different setting; the block's is the driver's. ``max_nodes``
# also named a job's own size cap, beside this one in a campaign (site_overrides and jobs).
RENAMED_KEYS = {"heartbeat_timeout_s": "driver_timeout_s", "max_nodes": "max_harvested_nodes"}


class SiteProfile(InputModel):
    """Settings of one site. Times are seconds; node counts are whole nodes."""

    name: str = "site"
    scheduler: Literal["slurm", "pbs", "emulated"] = "slurm"
    partition: str | None = Field(None, description="Slurm partition for blocks (backfill tier)")
    qos: str | None = Field(None, description="Slurm QOS for blocks (e.g. a preemptable one)")
    queue: str | None = Field(None, description="PBS queue for blocks")
    account: str | None = Field(None, description="account charged for blocks")
    submit_options: tuple[str, ...] = Field(
        (),
        description=(
            "more options for every block's sbatch/qsub and start test, one option per item "
            "as after #SBATCH/#PBS (e.g. --constraint=gpu, -l filesystems=home:eagle); "
            "written into the block script as directive lines"
        ),
    )
    poll_interval_s: float = Field(30.0, gt=0, description="seconds between snapshots")
    safety_margin_s: float = Field(
        120.0, ge=0, description="block ends this long before its window (>= 2 bf_resolution)"
    )
    signal_margin_s: float = Field(60.0, ge=0, description="USR1 this long before the walltime")
    yield_grace_s: float = Field(
        5.0, ge=0, description="drain time before a yielding block is cancelled"
    )
    teardown_s: float = Field(
        1.0,
        ge=0,
        description=(
            "a cancelled block's cancel -> its end in the scheduler's books, assumed until the "
            "provider has measured it (the recent worst of its own cancels is then used); a "
            "yield begins this much earlier (harvest/teardown.py)"
        ),
    )
    walltime_margin_s: float | None = Field(
        None,
        ge=0,
        description=(
            "the provider cancels a block still running this long after its walltime ends "
            "(whatever its worker does); None: 5 s after the scheduler's own time-limit check "
            "(slurm 35, pbs 5, emulated 5; harvest/walltime.py says why)"
        ),
    )
    start_timeout_s: float = Field(
        30.0, gt=0, description="cancel a block still pending after this"
    )
    start_tolerance_s: float = Field(10.0, ge=0, description="'starts now' means within this")
    min_block_s: Annotated[float, Field(gt=0)] | Literal["auto"] = Field(
        120.0,
        description=(
            "shortest walltime worth a block; auto: AUTO_STARTUPS times the measured start-up "
            "(a block then trains at least 3/4 of its walltime)"
        ),
    )
    startup_s: float = Field(
        DEFAULT_STARTUP_S,
        gt=0,
        description=(
            "node idle -> first training step assumed by min_block_s: auto until the "
            "controller has measured it"
        ),
    )
    drain_margin_s: float | None = Field(
        None,
        ge=0,
        description=(
            "ranks leave a block this long before its walltime (time to commit and write the "
            "last checkpoint on this site); None: the controller's default, 30 s"
        ),
    )
    max_walltime_s: float = Field(4 * 3600.0, gt=0, description="longest block walltime")
    granularity_s: float = Field(60.0, gt=0, description="the scheduler's walltime unit")
    max_harvested_nodes: int = Field(
        16, ge=0, description="cap on harvested nodes, all blocks together"
    )
    max_nodes_per_block: int = Field(4, ge=1)
    min_nodes_per_block: int = Field(1, ge=1)
    max_blocks: int = Field(4, ge=1, description="Parsl blocks (slots) the provider keeps")
    quantile: float = Field(0.1, ge=0, le=1, description="window quantile (learned model only)")
    group_tolerance_s: float = Field(
        300.0, ge=0, description="nodes whose windows differ less share a block"
    )
    reservations: bool = Field(
        True, description="read advance reservations (one more query) and keep blocks out of them"
    )
    preemption: Literal["none", "partition", "qos"] = Field(
        "none",
        description=(
            "how the scheduler takes blocks back for native jobs: none (polling mode: the "
            "provider yields them), partition or qos (preemption mode: `partition` or `qos` is "
            "one Slurm preempts, PreemptType=preempt/partition_prio or preempt/qos)"
        ),
    )
    preempt_grace_s: float = Field(
        0.0, ge=0, description="the site's GraceTime: notice a preempted block gets (SIGTERM)"
    )
    watch_interval_s: float | None = Field(
        None,
        gt=0,
        description=(
            "Slurm (either mode) and PBS: between polls, one squeue (plain qstat -t) this "
            "often; a native arrival or end seen there starts a poll at once, so a freed node "
            "is filled, and a block in a native's way told to go, within about this long "
            "(None: only the polls)"
        ),
    )
    driver_timeout_s: float = Field(
        30.0,
        ge=10,
        le=50,
        description="dead-man switch: a block ends this long after the driver's last heartbeat",
    )
    test_start: bool = Field(True, description="confirm 'starts now' with sbatch --test-only")
    pin_nodes: bool = Field(True, description="submit blocks to the planned nodes (--nodelist)")
    launcher: Literal["srun", "none"] = "srun"
    max_consecutive_failures: int = Field(
        3, ge=1, description="failed blocks in a row before giving up"
    )
    command_timeout_s: float = Field(30.0, gt=0)
    command_retries: int = Field(2, ge=0)
    worker_init: str = Field(
        "",
        description=(
            "shell lines run before the worker command; empty: the driver's interpreter's "
            "folder first on PATH (PBS starts a block in a login environment)"
        ),
    )
    address: str | None = Field(
        None, description="address of the driver's host that compute nodes reach (HTEX, ranks)"
    )
    interface: str | None = Field(
        None,
        description="network interface compute nodes reach the driver's host on (e.g. hsn0); "
        "its address is used when 'address' is not set",
    )
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (one rank is bound to each)")
    ranks_per_node: int | None = Field(
        None, ge=1, description="ranks per node (default: gpus_per_node, else 1)"
    )
    emulated: EmulatedSettings | None = Field(
        None, description="the emulated site (scheduler: emulated only; docs/schedulers.md)"
    )

    @field_validator("submit_options", mode="before")
    @classmethod
    def _one_list(cls, value: Any) -> Any:
        # A lone string would be taken as one character per option.
        if isinstance(value, str):
            raise ValueError(f"a list of options, one per item (- {value!r}), not one string")
        return value

    @field_validator("submit_options")
    @classmethod
    def _options_of_the_scheduler(
        cls, options: tuple[str, ...], info: ValidationInfo
    ) -> tuple[str, ...]:
        scheduler = info.data.get("scheduler", "slurm")
        if options and scheduler not in OPTION_CHECKERS:
            raise ValueError(f"scheduler: {scheduler} runs no submit command: leave it empty")
        checker = OPTION_CHECKERS.get(scheduler)
        if checker is None:
            return options
        checked = []
        for i, option in enumerate(options):
            try:
                checked.append(" ".join(checker.option_argv(option)))
            except ValueError as exc:
                raise ValueError(f"item {i + 1}: {exc}") from None
        return tuple(checked)

    @property
    def blocks_on_this_host(self) -> bool:
        """Whether blocks run on the driver's own host (the emulated site)."""
        return self.scheduler == "emulated"

    @property
    def destination(self) -> str | None:
        """Where blocks go: the PBS queue with ``scheduler: pbs``, else the partition."""
        return self.queue if self.scheduler == "pbs" else self.partition

    @property
    def node_ranks(self) -> int:
        """Ranks per node: ``ranks_per_node``, else one per GPU, else 1."""
        return self.ranks_per_node or max(1, self.gpus_per_node)

    def block_floor_s(self, startup_s: float) -> float:
        """The shortest walltime worth a block: ``min_block_s``, or with ``auto``
        ``AUTO_STARTUPS`` x ``startup_s`` (node idle -> first training step, as measured),
        rounded up to ``granularity_s`` and at most ``max_walltime_s``."""
        if self.min_block_s != "auto":
            return self.min_block_s
        floor = math.ceil(AUTO_STARTUPS * startup_s / self.granularity_s) * self.granularity_s
        return min(self.max_walltime_s, max(self.granularity_s, floor))

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """A key renamed since a profile may have been written: refused, naming the new one."""
        if isinstance(data, dict):
            for old, new in RENAMED_KEYS.items():
                if old in data:
                    raise ValueError(f"{old} was renamed {new}: write {new}: {data[old]}")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> SiteProfile:
        if self.min_nodes_per_block > self.max_nodes_per_block:
            raise ValueError(
                f"min_nodes_per_block ({self.min_nodes_per_block}) > "
                f"max_nodes_per_block ({self.max_nodes_per_block})"
            )
        if self.yield_grace_s >= self.poll_interval_s:
            raise ValueError(
                f"yield_grace_s ({self.yield_grace_s:g}) must be shorter than poll_interval_s "
                f"({self.poll_interval_s:g}): a yield has to finish within one poll"
            )
        if self.min_block_s != "auto" and self.min_block_s > self.max_walltime_s:
            raise ValueError(
                f"min_block_s ({self.min_block_s:g}) > max_walltime_s ({self.max_walltime_s:g})"
            )
        if self.preemption != "none":
            if self.scheduler != "slurm":
                raise ValueError(
                    f"preemption: {self.preemption} is for scheduler: slurm; with "
                    f"{self.scheduler} use preemption: none"
                )
            where = self.partition if self.preemption == "partition" else self.qos
            if not where:
                raise ValueError(
                    f"preemption: {self.preemption} needs `{self.preemption}:` set to the "
                    f"{self.preemption} that Slurm preempts for native jobs"
                )
        if self.scheduler == "emulated":
            if self.emulated is None:
                raise ValueError("emulated: required with scheduler: emulated (at least {})")
            if self.launcher != "none":
                raise ValueError(
                    "launcher: must be none with scheduler: emulated (the emulated site runs "
                    "the block script once per virtual node itself)"
                )
        elif self.emulated is not None:
            raise ValueError(f"emulated: only for scheduler: emulated, not {self.scheduler}")
        return self

    def with_overrides(self, **changes: Any) -> SiteProfile:
        """A copy with some settings changed, validated like a file."""
        return profile_from_mapping({**self.model_dump(), **changes}, source="overrides")


def profile_from_mapping(data: Any, *, source: str = "<mapping>") -> SiteProfile:
    """Validate a mapping (a parsed YAML document) into a :class:`SiteProfile`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a site profile must be a mapping, got {type(data).__name__}")
    try:
        return SiteProfile(**data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(profile)"
            problems.append(f"{key}: {err['msg']}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


def user_profile_folder() -> Path:
    """The user's own profiles: ``$XDG_CONFIG_HOME/parsl-malleable/sites``, by default
    ``~/.config/parsl-malleable/sites`` (a relative XDG_CONFIG_HOME is ignored, as the XDG
    base directory specification says)."""
    config = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config) if config and os.path.isabs(config) else Path.home() / ".config"
    return base / USER_PROFILES


def profile_folders() -> list[Path]:
    """Folders searched for a profile by name, in order: ``$PM_PROVIDER_PROFILES``
    (``os.pathsep``-separated), then the user's folder (:func:`user_profile_folder`, listed
    even before it exists, so that messages say where to put a profile), then the shipped
    profiles: ``parsl_malleable/site_profiles`` in an installed wheel, the repository's
    ``providers/`` folder in a checkout or editable install."""
    folders = [Path(p) for p in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep) if p]
    shipped = SHIPPED_PROFILES if SHIPPED_PROFILES.is_dir() else REPO_PROFILES
    for folder in (user_profile_folder(), shipped):
        if folder not in folders:
            folders.append(folder)
    return folders


@dataclass(frozen=True)
class FoundProfile:
    """One profile file in :func:`profile_folders`. ``shadowed_by``: the file of the same
    name in an earlier folder, which is the one a name finds (None: this one is found)."""

    name: str
    path: Path
    folder: Path
    shadowed_by: Path | None = None


def found_profiles() -> list[FoundProfile]:
    """Every profile file in :func:`profile_folders`, in search order (by name within a
    folder), each marked when an earlier folder has one of the same name."""
    first: dict[str, Path] = {}
    out = []
    for folder in profile_folders():
        if not folder.is_dir():
            continue
        files = sorted(p for p in folder.iterdir() if p.suffix in PROFILE_SUFFIXES)
        for path in files:
            if not path.is_file():
                continue
            earlier = first.setdefault(path.stem, path)
            out.append(FoundProfile(path.stem, path, folder, None if earlier == path else earlier))
    return out


def find_profile(name: str) -> Path:
    """The file of profile ``name``: a path, or ``<name>.yaml`` in the first of
    :func:`profile_folders` that has it. An unknown name is a ConfigError listing the
    folders searched, the names found and the nearest ones."""
    path = Path(name)
    if path.suffix in PROFILE_SUFFIXES or path.exists():
        if not path.is_file():
            raise ConfigError(f"site profile {name}: no such file")
        return path
    folders = profile_folders()
    for folder in folders:
        for suffix in PROFILE_SUFFIXES:
            candidate = folder / f"{name}{suffix}"
            if candidate.is_file():
                return candidate
    searched = ", ".join(str(f) for f in folders) or "(no folder)"
    names = sorted({p.name for p in found_profiles()})
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    available = f"available: {', '.join(names)}. " if names else "no profile found. "
    raise ConfigError(
        f"site profile {name!r}: no {name}.yaml in {searched}; {hint}{available}Put it in one "
        f"of these folders, pass its path, or add its folder to ${PROFILE_PATH_ENV} "
        f"({os.pathsep!r}-separated); `parsl-malleable sites` lists what is found"
    )


def load_profile(name_or_path: str | os.PathLike[str]) -> SiteProfile:
    """Read a site profile by name (``providers/<name>.yaml``) or path."""
    path = find_profile(os.fspath(name_or_path))
    data = load_yaml_file(path, "site profile")
    return profile_from_mapping(data if data is not None else {}, source=str(path))


__all__ = [
    "FoundProfile",
    "SiteProfile",
    "find_profile",
    "found_profiles",
    "load_profile",
    "profile_folders",
    "profile_from_mapping",
    "user_profile_folder",
]
