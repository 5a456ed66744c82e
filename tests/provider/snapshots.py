"""Hand-built snapshots of a 6-node machine (n1..n6, partitions batch and harvest)."""

from __future__ import annotations

from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot

NOW = 1_000_000.0
NAMES = [f"n{i}" for i in range(1, 7)]


def machine(
    running: list[RunningJob],
    pending: list[PendingJob] = (),  # type: ignore[assignment]
    *,
    partitions: dict[str, tuple[str, ...]] | None = None,
) -> Snapshot:
    """Nodes held by ``running`` are allocated, the others idle."""
    held = {n for job in running for n in job.nodes}
    parts = partitions or {}
    nodes = [
        Node(
            name,
            NodeState.ALLOCATED if name in held else NodeState.IDLE,
            parts.get(name, ("batch", "harvest")),
        )
        for name in NAMES
    ]
    return Snapshot(
        now=NOW,
        nodes=nodes,
        running=list(running),
        pending=list(pending),
        backfill="conservative",
    )


def native(job_id: str, nodes: tuple[str, ...], ends_in: float, ran: float = 60.0) -> RunningJob:
    """A native job that started ``ran`` s ago and whose limit ends in ``ends_in`` s."""
    return RunningJob(job_id, nodes, NOW - ran, ran + ends_in, "batch", "alice")


def block(job_id: str, nodes: tuple[str, ...], ends_in: float) -> RunningJob:
    """One of our blocks, started 30 s ago."""
    return RunningJob(job_id, nodes, NOW - 30.0, 30.0 + ends_in, "harvest", "pm", ours=True)


def queued(job_id: str, num_nodes: int, limit: float, *, ours: bool = False) -> PendingJob:
    return PendingJob(job_id, num_nodes, limit, NOW - 10.0, "batch", "bob", ours=ours)
