"""The replay's costs, measured on the real runtime: a calibration file and how it is applied.

FreeTrain's replayer charges its workload's ``Tcup``/``Tcdw`` (seconds, per rescale) and treats an
idle node as usable the moment it is idle. The runtime here pays differently: a node that goes
idle trains only once a block has started on it and its rank joined (``node_start_s``, measured
from the node going idle to its first step; the job's other ranks go on training meanwhile),
and each membership change then pauses the whole job for a rendezvous (``scale_up_s`` when it
gains ranks, ``scale_down_s`` when it loses them). ``benchmarks/bench_block_start.py`` measures
all three on the local Slurm cluster and writes them as JSON; ``parsl-malleable replay
--calibration FILE`` (and :func:`apply_calibration`) replays with them: every idle interval
starts ``node_start_s`` late (shorter ones are dropped: a block there never trains; one open
when the timeline starts was idle before it and is kept as it is) and every job's pauses are
the measured ones: under the replay's runtime physics (its default) a node then joins with no
further start-up (it is in the late start), regroups ``scale_up_s`` and leaves
``scale_down_s``; under FreeTrain's, the job's ``scale_up_s`` / ``scale_down_s`` are those.
:meth:`Calibration.physics` is the same calibration as a runtime physics on the timeline as it
is (every node starts ``node_start_s`` after it is taken, the job's other nodes training on).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import Field, StrictStr

from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import Number, boundary
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.workload import Physics, ReplayJob


@boundary(ConfigError)
class Calibration:
    """Measured costs of the runtime (seconds) and where they were measured."""

    node_start_s: Annotated[Number, Field(ge=0)]
    scale_up_s: Annotated[Number, Field(ge=0)]
    scale_down_s: Annotated[Number, Field(ge=0)]
    measured_by: StrictStr = ""
    samples: Annotated[int, Field(ge=0)] = 0

    def physics(self) -> Physics:
        """These costs as the replay's runtime physics (no late timeline needed)."""
        return Physics("runtime", self.node_start_s, self.scale_up_s, self.scale_down_s)


def save_calibration(calibration: Calibration, path: str | Path) -> None:
    """Write ``calibration`` as JSON."""
    Path(path).write_text(json.dumps(dataclasses.asdict(calibration), indent=1) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; a missing or unknown key, a bad value or broken JSON is a
    ConfigError naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"calibration {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"calibration {path}: expected a JSON object, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(Calibration)}
    if unknown := sorted(set(data) - known):
        raise ConfigError(f"calibration {path}: unknown keys {unknown}; known: {sorted(known)}")
    try:
        return Calibration(**data)
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"calibration {path}: {exc}") from exc


def apply_calibration(
    timeline: IdleTimeline, jobs: list[ReplayJob], calibration: Calibration
) -> tuple[IdleTimeline, list[ReplayJob]]:
    """The timeline as the runtime can use it (each idle interval from ``node_start_s`` after
    it opens; one already open at the timeline's start as it is) and the jobs with the
    measured pauses."""
    # An interval open at the timeline's start was idle before it: its block started earlier.
    opening = timeline.start > timeline.t0
    late = IdleTimeline.build(
        timeline.names,
        timeline.node,
        np.where(opening, timeline.start + calibration.node_start_s, timeline.start),
        timeline.end,
        timeline.source + f" (nodes start {calibration.node_start_s:.1f} s late)",
        timeline.t0,
        timeline.t1,
    )
    # Both physics charge the measured pauses; the start-up is in the late timeline already.
    paused = [
        dataclasses.replace(
            job,
            scale_up_s=calibration.scale_up_s,
            scale_down_s=calibration.scale_down_s,
            startup_s=0.0,
            regroup_s=calibration.scale_up_s,
            leave_s=calibration.scale_down_s,
        )
        for job in jobs
    ]
    return late, paused


__all__ = ["Calibration", "apply_calibration", "load_calibration", "save_calibration"]
