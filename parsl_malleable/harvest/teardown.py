"""How long a cancelled block takes to leave its nodes, measured from the provider's cancels.

A yield must begin early enough that the nodes are free when the queued job is planned to take
them: the next poll that can see the plan, the yield's notice (``yield_grace_s``) and the
scheduler's teardown (the cancel to the job's end in the scheduler's books). The teardown is the
one term no setting fixes: PBS's qdel ends a job in 0.3-0.5 s on the test server, a site's MoM
with a slow epilogue takes longer. So every cancelled block that had started and whose end time
the scheduler reports gives a sample (end - cancel sent), and the recent worst is used, starting
from the profile's ``teardown_s``. Slurm records a cancelled job's end when slurmctld takes the
cancel; the node's COMPLETING time after that (KillWait, the epilogue) is not in the sample.
"""

from __future__ import annotations

from collections import deque

#: Samples kept: the worst of the recent ones, so one slow epilogue long ago does not count.
RECENT = 20
#: A longer "teardown" is not one: the block ended on its own, or the clocks disagree.
MAX_SAMPLE_S = 300.0
#: Slurm and PBS print times in whole seconds: an end printed as second s came before s + 1.
#: A sample counts the end at its latest, so a teardown is never taken for shorter than it was.
PRINTED_RESOLUTION_S = 1.0


class TeardownEstimate:
    """The recent worst cancel -> end of the provider's blocks (``seconds``)."""

    def __init__(self, initial_s: float) -> None:
        self.initial_s = initial_s
        self._recent: deque[float] = deque(maxlen=RECENT)
        self.measured = 0

    def add(self, cancel_sent_at: float, ended_at: float) -> None:
        """One cancelled block's cancel time and its end in the scheduler's books (as the
        scheduler prints it: whole seconds)."""
        seconds = ended_at + PRINTED_RESOLUTION_S - cancel_sent_at
        if not 0.0 <= seconds <= MAX_SAMPLE_S:
            return  # ended before the cancel (on its own), or a clock off by minutes
        self._recent.append(seconds)
        self.measured += 1

    @property
    def seconds(self) -> float:
        """The teardown a yield plans for: the recent worst, or ``initial_s`` before any."""
        return max(self._recent) if self._recent else self.initial_s

    def __repr__(self) -> str:
        return f"TeardownEstimate(seconds={self.seconds:.2f}, measured={self.measured})"


__all__ = ["MAX_SAMPLE_S", "PRINTED_RESOLUTION_S", "RECENT", "TeardownEstimate"]
