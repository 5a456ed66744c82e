"""The parts of a campaign's ``searches:`` entry: its space, sampler and pruner (docs/campaigns.md).

Each is checked when the campaign loads, with the allowed values named, so that a typo fails
at ``validate`` instead of in Optuna minutes later. Optuna itself is imported only by
:meth:`SamplerSpec.make` and :meth:`PrunerSpec.make`, when a run opens the study.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, model_validator

from parsl_malleable.inputs import InputModel

# Optuna keeps these as they are; any other choice (a list, a mapping) goes through as JSON text.
PLAIN_CHOICE = (type(None), bool, int, float, str)
MAX_GRID = 100_000  # points of a grid sampler's space, product of every parameter's values


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Distribution(InputModel):
    """One app argument's distribution: ``float`` (``low``, ``high``, ``log``, ``step``),
    ``int`` (``low``, ``high``, ``log``, ``step``) or ``categorical`` (``choices``)."""

    type: Literal["float", "int", "categorical"]
    low: int | float | None = None
    high: int | float | None = None
    log: bool = False
    step: int | float | None = Field(None, gt=0)
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _fits_its_type(self) -> Distribution:
        given = self.model_fields_set - {"type"}
        if self.type == "categorical":
            extra = given - {"choices"}
            if extra:
                raise ValueError(f"categorical takes only choices; got {', '.join(sorted(extra))}")
            if not self.choices:
                raise ValueError("categorical needs choices: a list of at least one value")
            self._check_choices(self.choices)
            return self
        if "choices" in given:
            raise ValueError(f"{self.type} takes low, high, log and step, not choices")
        if self.low is None or self.high is None:
            raise ValueError(f"{self.type} needs low and high")
        if self.type == "int" and not all(
            isinstance(v, int) for v in (self.low, self.high, self.step or 1)
        ):
            raise ValueError(
                f"int needs whole numbers for low, high and step; got low={self.low}, "
                f"high={self.high}, step={self.step}"
            )
        if not self.low < self.high:
            raise ValueError(f"needs low < high; got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log needs low > 0; got low={self.low}")
        if self.log and self.step is not None and not (self.type == "int" and self.step == 1):
            raise ValueError("log and step do not go together (Optuna samples one or the other)")
        return self

    @staticmethod
    def _check_choices(choices: list[Any]) -> None:
        seen: set[str] = set()
        for choice in choices:
            try:
                text = json.dumps(choice, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError(f"choice {choice!r} is not a plain YAML value") from None
            if text in seen:
                raise ValueError(f"choice {choice!r} is listed twice")
            seen.add(text)

    @property
    def encoded(self) -> bool:
        """Whether Optuna sees this categorical's choices as JSON text (some are lists or
        mappings, which its storage cannot keep as values)."""
        return self.choices is not None and not all(
            isinstance(c, PLAIN_CHOICE) for c in self.choices
        )

    def grid_values(self) -> list[Any] | None:
        """Every value, as Optuna sees it, for the grid sampler (None: a float range)."""
        if self.type == "categorical":
            assert self.choices is not None
            return [self.encode(c) for c in self.choices]
        if self.type == "int":
            assert isinstance(self.low, int) and isinstance(self.high, int)
            return list(range(self.low, self.high + 1, int(self.step or 1)))
        return None

    def examples(self) -> list[Any]:
        """Values to check against the app's annotation: every choice, or both ends."""
        if self.type == "categorical":
            assert self.choices is not None
            return list(self.choices)
        assert self.low is not None and self.high is not None
        if self.type == "int":
            return [int(self.low), int(self.high)]
        return [float(self.low), float(self.high)]

    def encode(self, value: Any) -> Any:
        """A value as Optuna keeps it."""
        return json.dumps(value, sort_keys=True) if self.encoded else value

    def decode(self, value: Any) -> Any:
        """A value Optuna gave, as the app gets it."""
        return json.loads(value) if self.encoded and isinstance(value, str) else value

    def optuna(self) -> Any:
        """The Optuna distribution."""
        from optuna import distributions as d

        if self.type == "categorical":
            assert self.choices is not None
            return d.CategoricalDistribution([self.encode(c) for c in self.choices])
        if self.type == "int":
            assert isinstance(self.low, int) and isinstance(self.high, int)
            return d.IntDistribution(self.low, self.high, log=self.log, step=int(self.step or 1))
        assert self.low is not None and self.high is not None
        return d.FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def describe(self) -> str:
        """``float 0.001..0.5 log``, ``int 1..3``, ``one of [32], [64]``."""
        if self.type == "categorical":
            assert self.choices is not None
            return "one of " + ", ".join(json.dumps(c) for c in self.choices)
        text = f"{self.type} {self.low:g}..{self.high:g}"
        if self.step is not None and not (self.type == "int" and self.step == 1):
            text += f" step {self.step:g}"
        return text + (" log" if self.log else "")


class SamplerSpec(InputModel):
    """How trials' parameters are chosen: ``grid`` (every combination, categorical and int
    spaces only), ``random`` or ``tpe``; reproducible from ``seed``."""

    type: Literal["grid", "random", "tpe"] = "tpe"
    seed: int = 0
    n_startup_trials: int | None = Field(
        None, ge=0, description="tpe: random trials before TPE models the space (default 10)"
    )

    @model_validator(mode="after")
    def _options(self) -> SamplerSpec:
        if self.n_startup_trials is not None and self.type != "tpe":
            raise ValueError(f"n_startup_trials is an option of tpe, not of {self.type}")
        return self

    def make(self, space: dict[str, Distribution], seed: int) -> Any:
        """The Optuna sampler, seeded with ``seed`` (:func:`.search.sampler_seed`)."""
        import optuna

        if self.type == "grid":
            grid = {name: dist.grid_values() or [] for name, dist in space.items()}

            class Grid(optuna.samplers.GridSampler):
                """Optuna's grid without its stop at the last point: ``Study.stop`` works only
                inside ``optimize`` (ask-and-tell raises); the budget ends a search here."""

                def after_trial(self, *args: Any, **kwargs: Any) -> None:
                    return None

            return Grid(grid, seed=seed)
        if self.type == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if self.n_startup_trials is None:
            return optuna.samplers.TPESampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)


PRUNER_OPTIONS: dict[str, tuple[str, ...]] = {
    "asha": ("min_resource", "reduction_factor", "min_early_stopping_rate"),
    "hyperband": ("min_resource", "max_resource", "reduction_factor"),
    "median": ("n_startup_trials", "n_warmup_steps", "interval_steps"),
    "none": (),
}


class PrunerSpec(InputModel):
    """When a trial is stopped early: ``asha`` (asynchronous successive halving), ``hyperband``,
    ``median`` (below the median of earlier trials at the same step) or ``none``. Steps are in
    the search's ``resource`` (an epoch, say)."""

    type: Literal["asha", "hyperband", "median", "none"] = "none"
    min_resource: int | Literal["auto"] | None = None
    max_resource: int | Literal["auto"] | None = None
    reduction_factor: int | None = Field(None, ge=2)
    min_early_stopping_rate: int | None = Field(None, ge=0)
    n_startup_trials: int | None = Field(None, ge=0)
    n_warmup_steps: int | None = Field(None, ge=0)
    interval_steps: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _options(self) -> PrunerSpec:
        allowed = PRUNER_OPTIONS[self.type]
        extra = sorted(self.model_fields_set - {"type", *allowed})
        if extra:
            takes = f"takes {', '.join(allowed)}" if allowed else "takes no options"
            raise ValueError(f"pruner {self.type} {takes}; got {', '.join(extra)}")
        for key in ("min_resource", "max_resource"):
            value = getattr(self, key)
            if isinstance(value, int) and value < 1:
                raise ValueError(f"{key} must be at least 1 (or auto); got {value}")
        low, high = self.min_resource, self.max_resource
        if isinstance(low, int) and isinstance(high, int) and low > high:
            # Optuna takes it and builds brackets whose first rung is past the last step: no
            # trial is ever judged, so the search silently runs without pruning.
            raise ValueError(
                f"min_resource ({low}) is more than max_resource ({high}): no trial would ever "
                "reach a rung, so none would be pruned"
            )
        return self

    def options(self) -> dict[str, Any]:
        """The options given, as Optuna's pruner takes them."""
        return {
            k: getattr(self, k) for k in PRUNER_OPTIONS[self.type] if k in self.model_fields_set
        }

    def make(self) -> Any:
        """The Optuna pruner."""
        from optuna import pruners

        kinds = {
            "asha": pruners.SuccessiveHalvingPruner,
            "hyperband": pruners.HyperbandPruner,
            "median": pruners.MedianPruner,
            "none": pruners.NopPruner,
        }
        return kinds[self.type](**self.options())

    def describe(self) -> str:
        """``asha (min_resource=1, reduction_factor=3)``."""
        options = ", ".join(f"{k}={v}" for k, v in self.options().items())
        return f"{self.type} ({options})" if options else self.type


def check_space(value: Any) -> Any:
    """A search's ``space`` before it is parsed: a non-empty mapping of argument names to
    mappings with a known ``type``; ValueError saying what is wrong otherwise."""
    example = "{lr: {type: float, low: 0.001, high: 0.1, log: true}}"
    if not isinstance(value, dict):
        raise ValueError(
            f"a mapping of app arguments to distributions is needed, like {example}; got "
            f"{type(value).__name__}"
        )
    if not value:
        raise ValueError(f"empty: name at least one app argument, like {example}")
    kinds = Distribution.model_fields["type"].annotation.__args__  # type: ignore[union-attr]
    for name, dist in value.items():
        if not isinstance(dist, dict):
            raise ValueError(
                f"{name}: a mapping with a type ({', '.join(kinds)}) is needed; got "
                f"{type(dist).__name__}"
            )
        if dist.get("type") not in kinds:
            got = f"got {dist['type']!r}" if "type" in dist else "none given"
            raise ValueError(f"{name}: type must be one of {', '.join(kinds)}; {got}")
    return value


__all__ = ["PRUNER_OPTIONS", "Distribution", "PrunerSpec", "SamplerSpec", "check_space"]
