"""Idle-window prediction: how long will each idle node stay idle?"""

from parsl_malleable.windows.snapshot import (
    Node,
    NodeState,
    PendingJob,
    Reservation,
    RunningJob,
    Snapshot,
)

__all__ = ["Node", "NodeState", "PendingJob", "Reservation", "RunningJob", "Snapshot"]
