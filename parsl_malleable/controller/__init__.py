"""The controller: blocks + training jobs + profiled curves -> the allocator -> ranks.

:class:`ControllerCore` makes the decisions (no clock, no I/O: the replay drives it too);
:class:`Controller` runs it live for one Parsl executor, with agents on the workers that take
its orders. See docs/controller.md.
"""

from parsl_malleable.controller.address import controller_address
from parsl_malleable.controller.blocks import BlockSource, BlockView, ProviderBlocks
from parsl_malleable.controller.core import ControllerCore, CoreSettings
from parsl_malleable.controller.live import Controller, configure, controller_for
from parsl_malleable.controller.model import Decision, DrainRanks, JobSpec, StartRanks
from parsl_malleable.controller.policy import PolicySettings, decide

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
