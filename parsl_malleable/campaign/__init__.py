"""Config-driven training campaigns: YAML models, runner, persisted state.

``run_campaign(spec, output)`` (:mod:`.api`) runs one from Python with the spec of its YAML file
and returns the results table; ``Campaign`` (:mod:`.spec`) is that spec's model. Both load on
first use: the command line imports this package and must stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parsl_malleable._lazy import lazy_exports

if TYPE_CHECKING:
    from parsl_malleable.campaign.api import run_campaign
    from parsl_malleable.campaign.spec import Campaign

__all__ = ["Campaign", "run_campaign"]

__getattr__, __dir__ = lazy_exports(
    globals(),
    {"Campaign": "parsl_malleable.campaign.spec", "run_campaign": "parsl_malleable.campaign.api"},
)
