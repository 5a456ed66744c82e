"""One default per setting: a setting that several parts take (a campaign's job entry,
``@malleable_app``'s options, the controller's job spec, the rank runtime, the coordinator, the
controller's policy) has one default, written once and read by the others.

It used to be written in each: ``max_nodes`` was 4 in a campaign and 1024 in ``ElasticOptions``
and ``JobSpec``; ``checkpoint_every`` 100 in a campaign and 200 elsewhere; the campaign's policy
section re-declared five of ``PolicySettings``' fields. The test compares every field (and
keyword default) of the same name across those parts; the exceptions below are listed with why.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections import defaultdict
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from parsl_malleable.allocate import api as allocate_api
from parsl_malleable.app import ElasticOptions, malleable_app
from parsl_malleable.campaign.spec import Campaign, JobTemplate, PolicySpec
from parsl_malleable.controller.core import CoreSettings
from parsl_malleable.controller.model import JobSpec
from parsl_malleable.controller.policy import PolicySettings
from parsl_malleable.elastic.checkpoint import CheckpointStore
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.membership import Membership
from parsl_malleable.elastic.settings import MembershipSettings, RankSettings
from parsl_malleable.harvest.site_profile import SiteProfile

REQUIRED = object()

# Same name, another setting, or None meaning "the other part's default":
DIFFERENT_MEANING = {
    # None: the controller's CoreSettings default
    "drain_margin_s": {"SiteProfile"},
    # None: the policy's assumed pause until a job's own is known
    "scale_up_s": {"JobSpec"},
    "scale_down_s": {"JobSpec"},
    # the campaign's is the run's time limit; the policy's a decision's solver budget
    "time_limit_s": {"Campaign"},
    # no campaign: '' in the checkpoint store's manifest field, None as the app's option
    "campaign": {"CheckpointStore"},
}
# allocate() calls its solver budget time_limit; the policy and the campaign's policy section
# call it time_limit_s.
SAME_SETTING = {("allocate", "time_limit"): "time_limit_s"}


def _defaults(part: Any) -> dict[str, object]:
    if isinstance(part, type) and issubclass(part, BaseModel):
        return {
            name: (REQUIRED if f.default is PydanticUndefined else f.default)
            for name, f in part.model_fields.items()
            if f.default_factory is None
        }
    if dataclasses.is_dataclass(part):
        return {
            f.name: (REQUIRED if f.default is dataclasses.MISSING else f.default)
            for f in dataclasses.fields(part)
            if f.default_factory is dataclasses.MISSING
        }
    target = part.__init__ if isinstance(part, type) else part
    return {
        name: p.default
        for name, p in inspect.signature(target).parameters.items()
        if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


PARTS: dict[str, Any] = {
    "JobTemplate": JobTemplate,
    "PolicySpec": PolicySpec,
    "Campaign": Campaign,
    "ElasticOptions": ElasticOptions,
    "malleable_app": malleable_app,
    "JobSpec": JobSpec,
    "PolicySettings": PolicySettings,
    "CoreSettings": CoreSettings,
    "RankSettings": RankSettings,
    "MembershipSettings": MembershipSettings,
    "Coordinator": Coordinator,
    "Membership": Membership,
    "CheckpointStore": CheckpointStore,
    "SiteProfile": SiteProfile,
    "allocate": allocate_api.allocate,
}


def _conflicts() -> dict[str, dict[str, object]]:
    by_name: dict[str, dict[str, object]] = defaultdict(dict)
    for label, part in PARTS.items():
        for name, default in _defaults(part).items():
            name = SAME_SETTING.get((label, name), name)
            if default is not REQUIRED and label not in DIFFERENT_MEANING.get(name, set()):
                by_name[name][label] = default
    # CheckpointStore calls it keep; Coordinator/Membership's max_nodes is a cap passed in
    by_name["keep_checkpoints"]["CheckpointStore"] = by_name.pop("keep", {}).get("CheckpointStore")
    for name in ("max_nodes", "min_nodes"):
        by_name[name].pop("Coordinator", None)
        by_name[name].pop("Membership", None)
    return {
        name: where for name, where in by_name.items() if len({repr(v) for v in where.values()}) > 1
    }


def test_every_setting_taken_by_several_parts_has_one_default() -> None:
    assert _conflicts() == {}


def test_the_library_allocator_and_the_controller_decide_alike_by_default() -> None:
    # allocate() as a library call and the controller's policy share every solver setting's
    # default (it was throughput vs weighted, pause before vs after, gap 1e-4 vs 1e-3, ...).
    shared = _defaults(allocate_api.allocate)
    policy = PolicySettings()
    for name in ("objective", "solver", "gap_rel", "pause_rate", "threads", "charge_start"):
        assert shared[name] == getattr(policy, name), name
    assert shared["time_limit"] == policy.time_limit_s


def test_the_shared_defaults_are_the_homes_values() -> None:
    job, rank = JobTemplate(app="m:f"), RankSettings()
    app = ElasticOptions(checkpoint_dir="/x")
    assert job.max_nodes == app.max_nodes == JobSpec(name="j").max_nodes
    assert job.checkpoint_every == app.checkpoint_every == rank.checkpoint_every
    assert PolicySpec().settings() == PolicySettings()
    # a campaign's policy section passes on what it sets, the rest is PolicySettings'
    assert PolicySpec(time_limit_s=2.0).settings().gap_rel == PolicySettings().gap_rel
