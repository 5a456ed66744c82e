"""The policies a replay compares, each a set of controller settings (the code is the same).

* ``freetrain``: FreeTrain's formulation (CCGrid 2023): the user's curves and rescale costs, one
  forward-looking time ``T_fwd`` for every node, no pause charged for a start, a rescale's
  pause priced at the rate before it, no migration,
  re-solved at every node event. Its published code bounds each job's change per decision
  through a big-M of (nodes + 1); our count model states "grow or shrink, never migrate"
  exactly, which is the intent, so that bound is not reproduced.
* ``malletrain``: the same, without user curves: throughput measured online, planned with the
  measured points joined by straight lines (MalleTrain, ICPE 2024).
* ``ours``: no user curves (the profiler's model, optimistic where unsure; jobs of one model
  share their measurements), windows predicted per node (horizon classes), pauses charged for
  starts and at the rate after a rescale (as the runtime pauses), decisions debounced.
* ``ours+curves``: ``ours`` given the user's curves and costs.
* ``greedy``: equal share (``allocate/equal.py``): every job the same number of nodes, no
  curves, re-run at every event; what a scheduler without scalability information does.
* ``marginal``: the allocator's greedy rule (best marginal gain per node, never shrinks a job)
  with the user's curves, re-run at every event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from parsl_malleable.controller.core import CoreSettings
from parsl_malleable.controller.policy import PolicySettings
from parsl_malleable.errors import ConfigError

# A replay makes thousands of decisions: above this many considered jobs the greedy rule
# decides (on a saturated Summit day it trained what the MILP did, 2.3x faster).
REPLAY_MILP_MAX_JOBS = 48

# A replay's solves stop at a number of branch-and-bound nodes, not at a time: with one thread
# each decision, and so the replay, is the same on any machine under any load (at 0.1 s the
# same 40-job day took 20.19 h to its result alone and 20.31 h beside two busy loops). Ten
# nodes: the whole root (its cuts and heuristics are most of the gain over the greedy start)
# and a little branching; on a 40-job day on 300 Summit nodes 610 of 621 solves met the 1 % gap
# within them. 0 stops before the root's heuristics and returns the greedy start unimproved.
REPLAY_MIP_NODE_LIMIT = 10

# Only a safety net under the node limit: a solve it stops depends on the machine's speed, and
# the replay counts and reports such decisions (``Replay.time_limited``).
REPLAY_TIME_LIMIT_S = 60.0

# Every event gets its own decision: FreeTrain re-solves at each node event.
EVERY_EVENT = {"debounce_s": 0.0, "max_delay_s": 0.0, "redecide_s": math.inf}


@dataclass(frozen=True)
class ReplayPolicy:
    """One policy: controller settings, whether jobs come with their curves and costs, and
    whether nodes get predicted windows."""

    name: str
    core: CoreSettings
    user_curves: bool
    windows: bool
    window_quantile: float = 0.5
    share_families: bool = False


def make_policy(
    name: str,
    *,
    t_fwd: float = 600.0,
    objective: str = "throughput",
    time_limit_s: float = REPLAY_TIME_LIMIT_S,
    mip_node_limit: int | None = REPLAY_MIP_NODE_LIMIT,
    gap_rel: float = 1e-2,
    horizon_s: float = 3600.0,
    completion_decay: float = 0.5,
) -> ReplayPolicy:
    """The policy called ``name`` (see the module docstring); ``t_fwd`` is FreeTrain's
    forward-looking time, ``horizon_s`` the longest plan of ours; every policy solves to a
    1 % gap or ``mip_node_limit`` branch-and-bound nodes, single-threaded, so that a replay
    repeats exactly on any machine; ``time_limit_s`` is a safety net whose stops the replay
    reports (``mip_node_limit=None`` makes it the limit instead, as live decisions have: 0.5 s
    and a 0.1 % gap; such a replay depends on the machine's load)."""
    base = PolicySettings(
        objective=objective,
        solver="highs",
        time_limit_s=time_limit_s,
        mip_node_limit=mip_node_limit,
        gap_rel=gap_rel,
        threads=1,
        completion_decay=completion_decay,
        milp_max_jobs=REPLAY_MILP_MAX_JOBS,
    )
    fixed_window = replace(
        base,
        default_window_s=t_fwd,
        max_horizon_s=t_fwd,
        max_classes=1,
        charge_start=False,
        pause_rate="before",
    )
    if name == "freetrain":
        core = CoreSettings(**EVERY_EVENT, drain_margin_s=0.0, policy=fixed_window)
        return ReplayPolicy(name, core, user_curves=True, windows=False)
    if name == "malletrain":
        policy = replace(fixed_window, curve_model="points")
        core = CoreSettings(**EVERY_EVENT, drain_margin_s=0.0, policy=policy)
        return ReplayPolicy(name, core, user_curves=False, windows=False)
    if name in ("greedy", "marginal"):
        policy = replace(fixed_window, solver="equal" if name == "greedy" else "greedy")
        core = CoreSettings(**EVERY_EVENT, drain_margin_s=0.0, policy=policy)
        return ReplayPolicy(name, core, user_curves=True, windows=False)
    if name in ("ours", "ours+curves"):
        policy = replace(base, default_window_s=horizon_s, max_horizon_s=horizon_s)
        core = CoreSettings(
            debounce_s=0.5, max_delay_s=2.0, redecide_s=300.0, drain_margin_s=0.0, policy=policy
        )
        return ReplayPolicy(
            name, core, user_curves=name == "ours+curves", windows=True, share_families=True
        )
    raise ConfigError(f"unknown replay policy {name!r}; choose one of {', '.join(POLICIES)}")


POLICIES = ("freetrain", "malletrain", "ours", "ours+curves", "greedy", "marginal")

__all__ = [
    "POLICIES",
    "REPLAY_MIP_NODE_LIMIT",
    "REPLAY_TIME_LIMIT_S",
    "ReplayPolicy",
    "make_policy",
]
