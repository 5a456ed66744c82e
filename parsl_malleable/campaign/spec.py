"""The campaign file: what to train, where, under which policy. Validated before anything starts.

A campaign names a site profile, a list of training jobs and sweeps that expand into more jobs
(HPO grid and random search, a NAS list of architectures), searches whose trials Optuna asks
while the campaign runs (:class:`Search`), the allocation policy and the output folder. Every
mistake is reported with its path in the file (``jobs[2].max_nodes``) and, where the value
comes from a fixed set, the allowed values; apps are imported and their arguments
checked against the training function's signature, so a typo fails in a second, not after the
first block starts. With its site profile, every job's ``min_nodes`` is checked against the most
nodes the site can lend (:func:`check_site_fits`): a job that could never start is an error,
not a job that waits forever. See docs/campaigns.md.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from parsl_malleable.allocate.objectives import OBJECTIVES
from parsl_malleable.allocate.solve import SOLVERS
from parsl_malleable.campaign.app_args import ArgTypes, check_app_args, resolve_app
from parsl_malleable.campaign.search_spec import Distribution, PrunerSpec, SamplerSpec, check_space
from parsl_malleable.campaign.trusted_files import (
    check_campaign_file,
    check_python_path,
    import_app,
)
from parsl_malleable.controller.model import JOB_MAX_NODES, JOB_MIN_NODES, JOB_PRIORITY
from parsl_malleable.controller.policy import PolicySettings
from parsl_malleable.elastic.metric_book import KEY as METRIC_NAME
from parsl_malleable.elastic.metric_book import MAX_KEY_CHARS
from parsl_malleable.elastic.settings import RANK_DEFAULTS, BatchMeaning
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import SAFE_NAME, InputModel, load_yaml_file

if TYPE_CHECKING:
    from parsl_malleable.harvest.site_profile import SiteProfile

NAME = SAFE_NAME
_NAME = re.compile(NAME)

Objective = Literal["throughput", "weighted", "speedup", "maxmin"]
Solver = Literal["cbc", "highs", "greedy", "equal"]
assert set(Objective.__args__) == set(OBJECTIVES)  # type: ignore[attr-defined]
assert set(Solver.__args__) == set(SOLVERS)  # type: ignore[attr-defined]

MAX_CAMPAIGN_JOBS = 10_000
"""The most jobs a campaign's ``jobs`` and ``sweeps`` may expand to, the same bound as a random
sweep's or a search's ``trials``. Every job is a state row, a checkpoint folder, a Parsl task and
a line of every table; far more is a mistake (a grid of 40 parameters of 4 values each is 4**40
points from a 1 kB file), and expanding it would take the machine's memory before any message.
The size is computed as a product, never by expanding."""


def _count(number: int) -> str:
    """``1,048,576``; ``1.21e+30`` from 31 digits on (a count no one reads digit by digit)."""
    return f"{number:,}" if number < 10**30 else f"{number:.2e}"


class JobTemplate(InputModel):
    """What every job needs; sweeps and jobs both start from these fields."""

    app: str = Field(description="training function, 'module:function' (train(ctx, **args))")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")
    epochs: int | None = Field(None, ge=1, description="passed as the app's epochs=")
    samples: int | None = Field(None, ge=1, description="passed as the app's samples=")
    # The defaults are the app's (JobSpec's and the rank runtime's): one home each.
    min_nodes: int = Field(JOB_MIN_NODES, ge=1)
    max_nodes: int = Field(
        JOB_MAX_NODES, ge=1, description="most nodes (default: no cap of its own; the site's)"
    )
    priority: float = Field(JOB_PRIORITY, gt=0, description="weight in the 'weighted' objective")
    checkpoint_every: int = Field(
        RANK_DEFAULTS.checkpoint_every, ge=0, description="commits between disk checkpoints"
    )
    backend: Literal["torch", "horovod"] = Field(RANK_DEFAULTS.backend, validate_default=True)
    batch: BatchMeaning = Field(
        RANK_DEFAULTS.batch,
        description="the sampler's batch_size: 'global' (one optimizer step, whatever the node "
        "count) or 'per_rank' (grows with the nodes, learning rate scaled with it)",
    )
    total_steps: int | None = Field(
        None,
        ge=1,
        description="steps the job takes in all, if known: the progress column shows done / "
        "total and an ETA (not passed to the app)",
    )

    @model_validator(mode="after")
    def _nodes(self) -> JobTemplate:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes ({self.min_nodes}) > max_nodes ({self.max_nodes})")
        return self

    def call_args(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The keyword arguments the training function gets."""
        out = {**self.args, **(extra or {})}
        if self.epochs is not None:
            out["epochs"] = self.epochs
        if self.samples is not None:
            out["samples"] = self.samples
        return out


class JobEntry(JobTemplate):
    """One training job."""

    name: Annotated[str, Field(pattern=NAME)]


class Uniform(InputModel):
    """A number drawn uniformly from [low, high] (on a log scale with ``log``)."""

    low: float
    high: float
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _range(self) -> Uniform:
        if not self.low <= self.high:
            raise ValueError(f"low ({self.low}) > high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log needs low > 0; got {self.low}")
        return self

    def draw(self, rng: random.Random) -> float | int:
        """One value."""
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return round(value) if self.integer else float(f"{value:.6g}")


class Choice(InputModel):
    """One of ``choices``, equally likely."""

    choices: list[Any] = Field(min_length=1)

    def draw(self, rng: random.Random) -> Any:
        """One value."""
        return rng.choice(self.choices)


class RandomSearch(InputModel):
    """``trials`` draws of ``params``, reproducible from ``seed``."""

    trials: int = Field(ge=1, le=10_000)
    seed: int = 0
    params: dict[str, Uniform | Choice] = Field(min_length=1)


class Sweep(JobTemplate):
    """Many jobs from one template: exactly one of ``grid``, ``random``, ``architectures``.

    ``grid``: every combination of the listed values; ``random``: random search;
    ``architectures``: a NAS list, each entry a mapping of arguments. Jobs are named
    ``<name>-<i>`` in expansion order.
    """

    name: Annotated[str, Field(pattern=NAME)]
    grid: dict[str, list[Any]] | None = None
    random: RandomSearch | None = None
    architectures: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Sweep:
        given = [k for k in ("grid", "random", "architectures") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "a sweep needs exactly one of grid, random, architectures; "
                f"got {', '.join(given) or 'none'}"
            )
        if self.grid is not None and (not self.grid or any(not v for v in self.grid.values())):
            raise ValueError("grid needs at least one parameter, each with at least one value")
        if self.architectures is not None and not self.architectures:
            raise ValueError("architectures needs at least one entry")
        if self.grid is not None and self.size() > MAX_CAMPAIGN_JOBS:
            counts = [len(v) for v in self.grid.values()]
            product = " x ".join(map(str, counts)) if len(counts) <= 8 else "the product"
            raise ValueError(
                f"grid expands to {_count(self.size())} jobs ({product} of the value counts of "
                f"its {len(counts)} parameter(s)); a campaign runs at most "
                f"{MAX_CAMPAIGN_JOBS:,} jobs: list fewer values, or use random or a search "
                "with a trials budget"
            )
        return self

    def size(self) -> int:
        """How many jobs the sweep expands to, computed without expanding it."""
        if self.grid is not None:
            return math.prod(len(values) for values in self.grid.values())
        if self.random is not None:
            return self.random.trials
        assert self.architectures is not None
        return len(self.architectures)

    def points(self) -> list[dict[str, Any]]:
        """The argument sets of the sweep, in order."""
        if self.grid is not None:
            keys = list(self.grid)
            return [
                dict(zip(keys, vals, strict=True))
                for vals in itertools.product(*(self.grid[k] for k in keys))
            ]
        if self.random is not None:
            rng = random.Random(self.random.seed)  # noqa: S311 (reproducible search, not secrets)
            return [
                {k: p.draw(rng) for k, p in self.random.params.items()}
                for _ in range(self.random.trials)
            ]
        assert self.architectures is not None
        return [dict(a) for a in self.architectures]

    def expand(self) -> list[tuple[JobEntry, dict[str, Any]]]:
        """``(job, swept parameters)`` for each point."""
        points = self.points()
        width = len(str(len(points) - 1))
        base = self.model_dump(exclude={"name", "grid", "random", "architectures", "args"})
        return [
            (JobEntry(name=f"{self.name}-{i:0{width}d}", args={**self.args, **p}, **base), p)
            for i, p in enumerate(points)
        ]


class Search(JobTemplate):
    """Trials that Optuna asks while the campaign runs (see docs/campaigns.md).

    ``space``: one distribution per app argument; ``args``: the arguments every trial gets;
    ``trials``: the budget (trials in all, every state counted); ``parallel``: trials training
    at once (default: the site's node count); ``sampler`` and ``pruner``: Optuna's;
    ``resource``: the reported metric that is the pruner's step (default: the report's step);
    ``nodes_by_promise``: the allocator weighs a trial by the rungs it has passed (:mod:`.promise`;
    False: all trials equal); ``hold_back``: with it, a trial its pruner would stop at its next
    rung is not grown onto new nodes (off by default: measured slower to the best model).
    Trials are jobs named ``<name>-NNN`` after Optuna's trial number. Needs the campaign's
    ``metric``.
    """

    name: Annotated[str, Field(pattern=NAME)]
    space: dict[str, Distribution]
    trials: int = Field(ge=1, le=10_000, description="trials in all (the budget)")
    parallel: int | None = Field(None, ge=1, description="trials at once (default: site nodes)")
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    resource: (
        Annotated[str, Field(pattern=METRIC_NAME.pattern, max_length=MAX_KEY_CHARS)] | None
    ) = Field(None, description="reported metric used as the pruner's step (default: the step)")
    nodes_by_promise: StrictBool = Field(
        True, description="weigh trials by the pruner's rungs they passed (campaign/promise.py)"
    )
    hold_back: StrictBool = Field(
        False, description="do not grow a trial its pruner would stop at its next rung"
    )

    @field_validator("space", mode="before")
    @classmethod
    def _space(cls, value: Any) -> Any:
        return check_space(value)

    @model_validator(mode="after")
    def _search(self) -> Search:
        fixed = set(self.args) | {k for k in ("epochs", "samples") if getattr(self, k) is not None}
        both = sorted(fixed & set(self.space))
        if both:
            raise ValueError(
                f"{', '.join(both)}: both fixed (args, epochs, samples) and searched (space); "
                "keep one"
            )
        if self.sampler.type == "grid":
            floats = [n for n, d in self.space.items() if d.grid_values() is None]
            if floats:
                raise ValueError(
                    f"sampler grid needs categorical or int spaces; {', '.join(floats)} is a "
                    "float range (list its values as categorical choices, or use random or tpe)"
                )
            points = math.prod(len(d.grid_values() or ()) for d in self.space.values())
            if self.trials > points:
                raise ValueError(
                    f"trials ({self.trials}) is more than the grid's {points} point(s); "
                    f"set trials: {points}"
                )
        return self

    def trial_name(self, number: int) -> str:
        """The job of trial ``number``: ``asha-007``."""
        return f"{self.name}-{number:03d}"

    def trial_job(self, number: int, params: dict[str, Any]) -> JobEntry:
        """Trial ``number``'s job: the fixed arguments and ``params``."""
        base = self.model_dump(
            include=set(JobTemplate.model_fields) - {"args"},
        )
        return JobEntry(name=self.trial_name(number), args={**self.args, **params}, **base)


# The controller's PolicySettings is the one home of these defaults; the campaign only names
# which of its fields a campaign file may set.
_POLICY = PolicySettings()


class PolicySpec(InputModel):
    """How the controller decides (see docs/controller.md): the fields of
    :class:`~parsl_malleable.controller.policy.PolicySettings` a campaign may set, with its
    defaults."""

    objective: Objective = Field(_POLICY.objective, validate_default=True)
    solver: Solver = Field(_POLICY.solver, validate_default=True)
    profiler: bool = Field(
        _POLICY.profiler, description="learn each job's curve from its throughput"
    )
    time_limit_s: float = Field(
        _POLICY.time_limit_s, gt=0, description="solver budget per decision"
    )
    explore_kappa: float = Field(_POLICY.explore_kappa, ge=0)

    def settings(self) -> PolicySettings:
        """The controller's policy settings: these fields, and its defaults for the rest."""
        return PolicySettings(**self.model_dump())


class MonitoringSpec(InputModel):
    """Parsl's monitoring (:class:`parsl.monitoring.MonitoringHub`): task and resource records
    in a database that ``parsl-visualize`` shows. Needs ``pip install 'parsl[monitoring]'``."""

    hub_address: str | None = Field(
        None, description="accepted for older configs; current Parsl ignores it"
    )
    workflow_name: str | None = Field(None, description="default: the campaign file's stem")
    workflow_version: str | None = None
    logging_endpoint: str | None = Field(
        None, description="database URL (default: monitoring.db in the run directory's parent)"
    )
    monitoring_debug: bool = False
    resource_monitoring_enabled: bool = True
    resource_monitoring_interval: float = Field(30.0, gt=0, description="seconds")


class ParslSpec(InputModel):
    """Options of the Parsl ``Config`` the runner loads (the executor and its provider come
    from the site profile). Unset keys keep the runner's defaults."""

    run_dir: str | None = Field(
        None, description="Parsl's run directory (default: runinfo/ in the output folder)"
    )
    retries: int = Field(0, ge=0, description="times Parsl reruns a failed task")
    app_cache: bool = Field(True, description="memoize apps that ask for it (cache=True)")
    strategy: Literal["simple", "htex_auto_scale", "none"] = "simple"
    strategy_period: float = Field(1.0, gt=0, description="seconds between strategy runs")
    max_idletime: float = Field(120.0, ge=0, description="strategy: idle seconds before scale-in")
    monitoring: MonitoringSpec | None = Field(
        None, description="true, or a mapping of MonitoringHub options"
    )
    usage_tracking: int = Field(0, ge=0, le=3, description="Parsl's usage tracking level")
    project_name: str | None = None
    garbage_collect: bool = True
    internal_tasks_max_threads: int = Field(10, ge=1)

    @field_validator("monitoring", mode="before")
    @classmethod
    def _monitoring_flag(cls, value: Any) -> Any:
        if value is True:
            return {}
        if value is False:
            return None
        return value


class MetricSpec(InputModel):
    """The metric that ranks the campaign's jobs: a name the training function reports with
    ``ctx.report`` and whether higher (``max``) or lower (``min``) is better."""

    name: Annotated[str, Field(pattern=METRIC_NAME.pattern, max_length=MAX_KEY_CHARS)]
    direction: Literal["max", "min"] = Field(
        description="'max' (accuracy) or 'min' (loss): which values are better"
    )


class Campaign(InputModel):
    """A whole campaign file."""

    site: str = Field("emulated", description="site profile name or YAML path")
    site_overrides: dict[str, Any] = Field(
        default_factory=dict, description="settings of the site profile to change"
    )
    output: str | None = Field(None, description="output folder (default: out/<file stem>)")
    policy: PolicySpec = Field(default_factory=PolicySpec)
    jobs: list[JobEntry] = Field(default_factory=list)
    sweeps: list[Sweep] = Field(default_factory=list)
    searches: list[Search] = Field(
        default_factory=list, description="Optuna searches: trials asked while the run goes"
    )
    time_limit_s: float | None = Field(None, gt=0, description="stop the run after this long")
    python_path: list[str] = Field(
        default_factory=list, description="folders (relative to this file) holding the apps"
    )
    parsl: ParslSpec = Field(default_factory=ParslSpec, description="Parsl Config options")
    metric: MetricSpec | None = Field(
        None, description="the reported metric that ranks jobs: {name: acc, direction: max}"
    )

    @model_validator(mode="after")
    def _some_jobs(self) -> Campaign:
        if not self.jobs and not self.sweeps and not self.searches:
            raise ValueError("a campaign needs at least one entry in jobs, sweeps or searches")
        if self.searches and self.metric is None:
            raise ValueError(
                "searches need the campaign's metric, the reported value they optimise: "
                "metric: {name: test_accuracy, direction: max}"
            )
        total = len(self.jobs) + sum(sweep.size() for sweep in self.sweeps)
        if total > MAX_CAMPAIGN_JOBS:
            parts = [f"jobs: {len(self.jobs)}"] if self.jobs else []
            parts += [f"sweeps[{i}]: {s.size():,}" for i, s in enumerate(self.sweeps)]
            raise ValueError(
                f"jobs and sweeps expand to {total:,} jobs ({', '.join(parts)}); a campaign "
                f"runs at most {MAX_CAMPAIGN_JOBS:,}: split it into several campaigns"
            )
        return self

    def expanded(self) -> list[tuple[JobEntry, dict[str, Any]]]:
        """Every job, sweeps expanded, with the swept parameters (empty for plain jobs)."""
        out: list[tuple[JobEntry, dict[str, Any]]] = [(j, {}) for j in self.jobs]
        for sweep in self.sweeps:
            out.extend(sweep.expand())
        return out


# ------------------------------------------------------------------------------- loading


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(campaign)"


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """The keys allowed where an unknown key ``loc`` was found."""
    current: Any = model
    key_next = False  # the part after a mapping field is one of its keys, not a field
    for part in loc[:-1]:
        if isinstance(part, int) or current is None or key_next:
            key_next = False
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            current = None
            continue
        ann = field.annotation
        key_next = getattr(ann, "__origin__", None) is dict
        args = getattr(ann, "__args__", ())
        candidates = [a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = candidates[0] if candidates else None
    if current is None or not hasattr(current, "model_fields"):
        return ""
    return ", ".join(current.model_fields)


def parse_campaign(data: Any, *, source: str = "<campaign>") -> Campaign:
    """Validate a parsed YAML mapping; every problem in one :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a campaign must be a mapping, got {type(data).__name__}")
    try:
        campaign = Campaign(**data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = _where(tuple(err["loc"]))
            if err["type"] == "extra_forbidden":
                allowed = _allowed_keys(Campaign, tuple(err["loc"]))
                problems.append(f"{where}: unknown key (allowed: {allowed})")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                problems.append(f"{where}: {msg}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None
    _check_names(campaign, source)
    return campaign


def _check_names(campaign: Campaign, source: str) -> None:
    seen: dict[str, str] = {}
    for i, (job, _) in enumerate(campaign.expanded()):
        if job.name in seen:
            raise ConfigError(f"{source}: job name {job.name!r} is used twice ({seen[job.name]})")
        seen[job.name] = f"job {i}"
        assert _NAME.match(job.name)
    searches: set[str] = set()
    for i, search in enumerate(campaign.searches):
        if search.name in searches:
            raise ConfigError(f"{source}: search name {search.name!r} is used twice")
        searches.add(search.name)
        trial = re.compile(rf"{re.escape(search.name)}-\d{{3,}}")
        clash = [name for name in seen if trial.fullmatch(name)]
        if clash:
            raise ConfigError(
                f"{source}: searches[{i}] names its trials {search.name}-000, {search.name}-001, "
                f"...; job {clash[0]!r} would be one of them: rename one"
            )


def _entries(campaign: Campaign) -> Iterator[tuple[str, int, JobEntry | Sweep | Search]]:
    """``(kind, index, entry)`` of every job, sweep and search, as messages name them
    (``jobs[1]``)."""
    for i, job in enumerate(campaign.jobs):
        yield "jobs", i, job
    for i, sweep in enumerate(campaign.sweeps):
        yield "sweeps", i, sweep
    for i, search in enumerate(campaign.searches):
        yield "searches", i, search


def check_apps(campaign: Campaign, *, source: str = "<campaign>") -> None:
    """Import every app, bind its arguments and check them against the function's annotations;
    :class:`ConfigError` naming each entry (``jobs[0].args.lr``, ``sweeps[1].grid.lr``)."""
    problems = []
    for kind, i, entry in _entries(campaign):
        try:
            fn = import_app(entry.app)  # checked first: no other user's code runs as us
        except ValueError as exc:
            problems.append(f"{kind}[{i}].app: {exc}")
            continue
        types = ArgTypes(fn)
        if isinstance(entry, Search):
            problems += _search_arg_problems(f"{kind}[{i}]", entry, fn, types)
            continue
        runs = entry.expand() if isinstance(entry, Sweep) else [(entry, {})]
        seen: set[str] = set()
        for point, (job, params) in enumerate(runs):
            args = job.call_args()
            try:
                check_app_args(fn, args)
            except ValueError as exc:
                problems.append(f"{kind}[{i}].args ({job.name}): {exc}")
                break
            for name, value in args.items():
                where = f"{kind}[{i}].{_arg_origin(entry, job, params, name, point)}"
                if where in seen or (problem := types.problem(name, value)) is None:
                    continue
                seen.add(where)
                of_job = f" (job {job.name})" if isinstance(entry, Sweep) else ""
                problems.append(f"{where}={value!r}{of_job}: {problem}")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))


def _search_arg_problems(where: str, search: Search, fn: Any, types: ArgTypes) -> list[str]:
    """What is wrong with a search's arguments: the fixed ones and every value its space can
    give, each named (``searches[0].space.lr``)."""
    example = {name: dist.examples()[0] for name, dist in search.space.items()}
    try:
        check_app_args(fn, search.call_args(example))
    except ValueError as exc:
        return [f"{where}.args/space: {exc}"]
    problems = []
    for name, value in search.call_args().items():
        origin = name if name in ("epochs", "samples") else f"args.{name}"
        if (problem := types.problem(name, value)) is not None:
            problems.append(f"{where}.{origin}={value!r}: {problem}")
    for name, dist in search.space.items():
        for value in dist.examples():
            if (problem := types.problem(name, value)) is not None:
                problems.append(f"{where}.space.{name}={value!r}: {problem}")
                break
    return problems


def _arg_origin(
    entry: JobEntry | Sweep, job: JobEntry, params: dict[str, Any], name: str, point: int
) -> str:
    """Where in the entry argument ``name`` of ``job`` was written: ``args.lr``, ``epochs``, a
    sweep's ``grid.lr``, ``random.params.lr`` or ``architectures[2].hidden``."""
    if name in ("epochs", "samples") and getattr(job, name) is not None:
        return name
    if isinstance(entry, Sweep) and name in params:
        if entry.grid is not None:
            return f"grid.{name}"
        if entry.random is not None:
            return f"random.params.{name}"
        return f"architectures[{point}].{name}"
    return f"args.{name}"


def site_capacity(profile: SiteProfile) -> tuple[int, str]:
    """The most nodes one job can ever hold on the site of ``profile``, and the limit that sets
    it (for messages), as far as the profile says: the cap on harvested nodes
    (``max_harvested_nodes``), the blocks the provider keeps times their largest size, and on
    the emulated site its virtual nodes. A live site's own node count is only known from its
    first snapshot (the runner checks that then)."""
    blocks = profile.max_blocks * profile.max_nodes_per_block
    limits = []
    if profile.emulated is not None:
        limits.append((profile.emulated.nodes, f"its {profile.emulated.nodes} virtual nodes"))
    limits += [
        (profile.max_harvested_nodes, f"its max_harvested_nodes: {profile.max_harvested_nodes}"),
        (
            blocks,
            f"its max_blocks x max_nodes_per_block: {profile.max_blocks} x "
            f"{profile.max_nodes_per_block}",
        ),
    ]
    # min() keeps the first of equal limits: the site's own size says most to the user.
    return min(limits, key=lambda limit: limit[0])


def check_site_fits(
    campaign: Campaign, profile: SiteProfile, *, source: str = "<campaign>"
) -> None:
    """:class:`ConfigError` naming every job whose ``min_nodes`` is above what the site can
    lend (:func:`site_capacity`): it would wait forever without a word."""
    capacity, why = site_capacity(profile)
    problems = []
    for kind, i, entry in _entries(campaign):
        if entry.min_nodes <= capacity:
            continue
        if isinstance(entry, Sweep):
            names = [job.name for job, _ in entry.expand()]
            jobs = f"jobs {names[0]} .. {names[-1]}" if len(names) > 1 else f"job {names[0]}"
        elif isinstance(entry, Search):
            jobs = f"its trials {entry.trial_name(0)} .."
        else:
            jobs = f"job {entry.name}"
        problems.append(
            f"{kind}[{i}] ({jobs}): min_nodes {entry.min_nodes} is more than site "
            f"{profile.name!r} can ever lend one job, {capacity} node(s) ({why}); "
            "lower min_nodes, or raise that limit (site_overrides) if the site has the nodes"
        )
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))


def load_campaign(path: str | Path) -> Campaign:
    """Read, validate and check the apps of a campaign file."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"campaign {path}: no such file")
    if not path.is_file():  # a FIFO would hang a reader; the loader checks again as it opens
        raise ConfigError(
            f"campaign {path}: not a regular file ({_file_kind(path)}); give the campaign's "
            "YAML file"
        )
    check_campaign_file(path)  # it names code to import: nobody else may have changed it
    data = load_yaml_file(path, "campaign")
    campaign = parse_campaign(data if data is not None else {}, source=str(path))
    add_python_path(campaign, path.parent)
    check_apps(campaign, source=str(path))
    return campaign


def _file_kind(path: Path) -> str:
    """What ``path`` is when it is not a regular file, for a message: ``a FIFO``."""
    import stat

    mode = path.stat().st_mode
    kinds = [
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a file")


def add_python_path(campaign: Campaign, base: Path) -> list[str]:
    """Put the campaign's ``python_path`` folders (relative to ``base``) first on ``sys.path`` and
    ``PYTHONPATH``, so the driver and the workers it starts import the same apps."""
    import os
    import sys

    check_python_path(base / p for p in campaign.python_path)  # before they shadow any module
    folders = [str((base / p).resolve()) for p in campaign.python_path]
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*folders, *current]))
    return folders


__all__ = [
    "MAX_CAMPAIGN_JOBS",
    "Campaign",
    "JobEntry",
    "MonitoringSpec",
    "ParslSpec",
    "PolicySpec",
    "RandomSearch",
    "Search",
    "Sweep",
    "check_apps",
    "check_site_fits",
    "load_campaign",
    "parse_campaign",
    "resolve_app",
    "site_capacity",
]
