"""Every number field of every model users fill from YAML or options refuses what pydantic's lax
mode would convert: ``True`` for a count, ``"5"`` for a number, NaN, and infinity unless the
field says it means "never" or "unlimited".

The rules lived in ``inputs.py`` and held for the API, but the campaign and site-profile models
used plain ``int``/``float``: ``max_nodes: true`` became 1, ``min_nodes: "1"`` 1 and
``poll_interval_s: "5"`` 5.0. They now all derive from :class:`InputModel`; this test walks every
subclass, so a field added later is held to the same rules.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import InputModel

REPO = Path(__file__).resolve().parents[1]
MODULES = [
    "parsl_malleable.campaign.spec",
    "parsl_malleable.campaign.search_spec",
    "parsl_malleable.harvest.site_profile",
    "parsl_malleable.schedulers.emulated.settings",
    "parsl_malleable.allocate.options",
]


def _models() -> list[type[InputModel]]:
    for name in MODULES:
        importlib.import_module(name)
    found, todo = [], list(InputModel.__subclasses__())
    while todo:
        model = todo.pop()
        found.append(model)
        todo.extend(model.__subclasses__())
    return sorted({m for m in found if m.__module__ in MODULES}, key=lambda m: m.__qualname__)


def _number_fields() -> list[tuple[type[InputModel], str]]:
    return [
        (model, name)
        for model in _models()
        for name, rule in model._number_rules.items()
        if rule.numbers
    ]


def test_the_walk_finds_the_yaml_models_and_their_number_fields() -> None:
    names = {m.__name__ for m in _models()}
    assert {"Campaign", "JobTemplate", "SiteProfile", "EmulatedSettings", "PrunerSpec"} <= names
    fields = {f"{m.__name__}.{n}" for m, n in _number_fields()}
    # plain, optional, union-with-literal and list-valued number fields are all found
    assert {
        "JobTemplate.max_nodes",
        "JobTemplate.epochs",
        "SiteProfile.poll_interval_s",
        "SiteProfile.min_block_s",
        "PrunerSpec.min_resource",
        "Uniform.low",
    } <= fields, sorted(fields)


def _error_at(model: type[InputModel], name: str, value: object) -> str:
    """The message of the error at field ``name`` when it holds ``value`` ('' if none)."""
    try:
        model.model_validate({name: value})
    except ValidationError as exc:
        return " ".join(e["msg"] for e in exc.errors() if e["loc"][:1] == (name,))
    return ""


def _allows_infinity(model: type[InputModel], name: str) -> bool:
    field = model.model_fields[name]
    said = [getattr(m, "allow_inf_nan", None) for m in field.metadata]
    return True in said or any(
        True in [getattr(m, "allow_inf_nan", None) for m in getattr(a, "__metadata__", ())]
        for a in getattr(field.annotation, "__args__", ())
    )


@pytest.mark.parametrize(
    ("model", "name"), _number_fields(), ids=lambda x: getattr(x, "__name__", x)
)
def test_a_number_field_refuses_a_bool_a_string_and_nan(model: type[InputModel], name: str) -> None:
    rule = model._number_rules[name]
    bad = [math.nan, "5"] + ([] if rule.bools else [True])
    if rule.items:  # a list of numbers: the bad value as a member
        bad = [[v] for v in bad]
    for value in bad:
        assert _error_at(model, name, value), (model.__name__, name, value)


@pytest.mark.parametrize(
    ("model", "name"), _number_fields(), ids=lambda x: getattr(x, "__name__", x)
)
def test_infinity_only_where_the_field_means_never_or_unlimited(
    model: type[InputModel], name: str
) -> None:
    if model._number_rules[name].items:
        pytest.skip("a list of numbers; its members are plain floats")
    refused = _error_at(model, name, math.inf)
    assert bool(refused) != _allows_infinity(model, name) or "less than" in refused, refused


def _campaign(tmp_path: Path, **job: object) -> Path:
    path = tmp_path / "c.yaml"
    entry = {"name": "a", "app": "apps.digits:train_elastic", "epochs": 2, **job}
    path.write_text(yaml.safe_dump({"python_path": [str(REPO)], "jobs": [entry]}))
    return path


@pytest.mark.parametrize(
    ("key", "text", "says"),
    [
        ("max_nodes", "true", "must be an integer, not a bool"),
        ("min_nodes", '"1"', "must be an integer, not a string"),
        ("priority", ".nan", "finite number"),
        ("priority", "'2.5'", "must be a number, not a string"),
    ],
)
def test_a_campaign_file_names_the_bad_value(
    tmp_path: Path, key: str, text: str, says: str
) -> None:
    from parsl_malleable.campaign.spec import load_campaign

    path = _campaign(tmp_path)
    path.write_text(path.read_text().replace("epochs: 2", f"epochs: 2\n  {key}: {text}"))
    with pytest.raises(ConfigError) as caught:
        load_campaign(path)
    assert f"jobs[0].{key}" in str(caught.value) and says in str(caught.value)


@pytest.mark.parametrize(
    ("key", "text", "says"),
    [
        ("poll_interval_s", '"5"', "must be a number, not a string"),
        ("max_harvested_nodes", "true", "must be an integer, not a bool"),
        ("command_timeout_s", ".inf", "finite number"),
        ("safety_margin_s", ".nan", "finite number"),
    ],
)
def test_a_site_profile_names_the_bad_value(tmp_path: Path, key: str, text: str, says: str) -> None:
    from parsl_malleable.harvest.site_profile import load_profile

    path = tmp_path / "site.yaml"
    path.write_text(f"name: mysite\nscheduler: slurm\n{key}: {text}\n")
    with pytest.raises(ConfigError) as caught:
        load_profile(path)
    assert key in str(caught.value) and says in str(caught.value), str(caught.value)
