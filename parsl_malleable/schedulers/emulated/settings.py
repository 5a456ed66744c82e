"""Settings of the emulated site (the ``emulated:`` part of a site profile).

The emulated site is a batch system inside the user's process: ``nodes`` virtual nodes on this
machine whose native load is a job trace replayed through the project's simulator, with time
compressed ``speedup`` times. See docs/schedulers.md, "The emulated site".
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from parsl_malleable.inputs import InputModel

SYNTHETIC = "synthetic"


class EmulatedSettings(InputModel):
    """What the emulated site replays and how fast. Times ending in ``_s`` are wall seconds
    unless named trace seconds."""

    nodes: int = Field(6, ge=1, le=4096, description="virtual nodes")
    trace: str = Field(
        SYNTHETIC,
        description="'synthetic' (generated, no download) or a trace file parsl_malleable reads",
    )
    jobs: int = Field(400, ge=1, description="synthetic trace: number of jobs")
    load: float = Field(0.8, gt=0, le=10, description="synthetic trace: offered load")
    seed: int = Field(0, ge=0, description="synthetic trace: random seed")
    speedup: float = Field(40.0, gt=0, description="trace seconds per wall second")
    start_s: float | None = Field(
        None,
        ge=0,
        description="trace seconds after the first submit where the replay starts "
        "(None: when half the nodes are first busy, skipping the empty warm-up)",
    )
    node_prefix: str = Field("vn", description="virtual nodes are <prefix>1 .. <prefix>N")
    notice_s: float = Field(
        0.0,
        ge=0,
        description="wall seconds a native job is queued at least before its start",
    )
    kill_grace_s: float = Field(2.0, gt=0, le=60, description="TERM to KILL, wall seconds")

    @field_validator("node_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or not value[0].isalpha() or not all(c.isalnum() or c in "-_" for c in value):
            raise ValueError(
                f"{value!r} must start with a letter and hold only letters, digits, - and _"
            )
        return value

    @field_validator("trace")
    @classmethod
    def _trace(cls, value: str) -> str:
        if value != SYNTHETIC and not Path(value).expanduser().is_file():
            raise ValueError(f"{value!r} is neither 'synthetic' nor a trace file")
        return value

    def node_names(self) -> list[str]:
        """The virtual nodes' names, in node order."""
        return [f"{self.node_prefix}{i}" for i in range(1, self.nodes + 1)]


__all__ = ["SYNTHETIC", "EmulatedSettings"]
