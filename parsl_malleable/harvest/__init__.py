"""What :class:`~parsl_malleable.provider.BackfillProvider` needs beside the class.

Site profiles (:mod:`.site_profile`), the book of slots and jobs (:mod:`.ledger`), the state
mapping (:mod:`.states`), block planning (:mod:`.planning`), the yield decision
(:mod:`.yielding`), ending blocks that outlive their walltime (:mod:`.walltime`), the demand
coupling to training jobs (:mod:`.demand`), what the controller may ask of the provider
(:mod:`.controller_link`), the block script (:mod:`.block_script`), the scheduler of a profile
(:mod:`.sites`) and a Parsl block error handler that knows harvested blocks end on
purpose (:mod:`.error_handler`). See docs/provider.md.

The names below are imported on first use: several pull in Parsl, pulp and numba, which a
light submodule (``parsl-malleable sites`` reads only profiles) must not pay for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parsl_malleable.harvest.demand import DemandContext, DemandFn, allocator_demand
    from parsl_malleable.harvest.error_handler import backfill_error_handler
    from parsl_malleable.harvest.ledger import BlockInfo, JobRecord, Phase
    from parsl_malleable.harvest.site_profile import SiteProfile, load_profile
    from parsl_malleable.harvest.sites import BlockScheduler, make_scheduler
    from parsl_malleable.harvest.yielding import blocks_in_the_way

_HOME = {
    "BlockInfo": "ledger",
    "BlockScheduler": "sites",
    "DemandContext": "demand",
    "DemandFn": "demand",
    "JobRecord": "ledger",
    "Phase": "ledger",
    "SiteProfile": "site_profile",
    "allocator_demand": "demand",
    "backfill_error_handler": "error_handler",
    "blocks_in_the_way": "yielding",
    "load_profile": "site_profile",
    "make_scheduler": "sites",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "BlockInfo",
    "BlockScheduler",
    "DemandContext",
    "DemandFn",
    "JobRecord",
    "Phase",
    "SiteProfile",
    "allocator_demand",
    "backfill_error_handler",
    "blocks_in_the_way",
    "load_profile",
    "make_scheduler",
]
