"""The controller: blocks + training jobs + profiled curves -> the allocator -> ranks.

:class:`ControllerCore` makes the decisions (no clock, no I/O: the replay drives it too);
:class:`Controller` runs it live for one Parsl executor, with agents on the workers that take
its orders. See docs/controller.md.

The modules: ``core`` (decisions), ``policy`` and ``admission`` (the allocator's inputs and
choice), ``model`` (jobs, decisions, orders), ``blocks`` (block sources), ``phases`` (a node's
phases, from submission to first step); live: ``live`` (the :class:`Controller` loop),
``agent_pool`` (its agents: nodes, hold and release), ``job_book`` (its jobs and how they end),
``agent_link`` (the driver's end of the agent channel), ``address``; on the workers:
``node_agent`` (the agent process that runs ranks on a node) and ``functions`` (how a training
function travels); ``agent`` is the old name of ``node_agent``, kept for one importer.

The names below are loaded on first use: an agent on a worker imports
``parsl_malleable.controller.node_agent`` alone, and must not pay for the allocator and Parsl's
DataFlowKernel before it can say hello (about 2 s of its start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parsl_malleable.controller.address import controller_address
    from parsl_malleable.controller.blocks import BlockSource, BlockView, ProviderBlocks
    from parsl_malleable.controller.core import ControllerCore, CoreSettings
    from parsl_malleable.controller.live import Controller, configure, controller_for
    from parsl_malleable.controller.model import Decision, DrainRanks, JobSpec, StartRanks
    from parsl_malleable.controller.policy import PolicySettings, decide

_WHERE = {
    "controller_address": "address",
    "BlockSource": "blocks",
    "BlockView": "blocks",
    "ProviderBlocks": "blocks",
    "ControllerCore": "core",
    "CoreSettings": "core",
    "Controller": "live",
    "configure": "live",
    "controller_for": "live",
    "Decision": "model",
    "DrainRanks": "model",
    "JobSpec": "model",
    "StartRanks": "model",
    "PolicySettings": "policy",
    "decide": "policy",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BlockSource",
    "BlockView",
    "Controller",
    "ControllerCore",
    "CoreSettings",
    "Decision",
    "DrainRanks",
    "JobSpec",
    "PolicySettings",
    "ProviderBlocks",
    "StartRanks",
    "configure",
    "controller_address",
    "controller_for",
    "decide",
]
