"""The campaign run of :func:`~.globus_driver.train_campaign`: it keeps the blocks it used.

Kept apart from :mod:`.globus_driver`, which a remote user imports to send the function: this
module imports the runner (and with it Parsl), which only the endpoint's side needs.
"""

from __future__ import annotations

from typing import Any

from parsl_malleable.campaign.runner import CampaignRunner


def block_row(record: Any) -> dict[str, Any]:
    """One job record of the provider's history (a block) as plain values."""
    return {
        "job_id": record.job_id,
        "block_id": record.block_id,
        "nodes": list(record.nodes),
        "start": record.start,
        "ended_at": record.ended_at,
        "end_state": record.end_state.name if record.end_state is not None else None,
        "cancel_reason": record.cancel_reason.value if record.cancel_reason else None,
        "yield_reason": record.yield_reason,
    }


#: What :meth:`DriverRunner.epoch_history` keeps of a coordinator's epoch (plain values).
EPOCH_KEYS = ("epoch", "world_size", "reason", "start_step", "last_step", "formed_at")


class DriverRunner(CampaignRunner):
    """A :class:`CampaignRunner` that reports its blocks and epochs as plain values."""

    @property
    def block_history(self) -> list[dict[str, Any]]:
        """The blocks of this run (:attr:`CampaignRunner.blocks`), each a :func:`block_row`."""
        return [block_row(r) for r in self.blocks]

    def epoch_history(self) -> dict[str, list[dict[str, Any]]]:
        """Per job of this run, its membership epochs: who trained from which step to which
        (a job that went on after a yield has an epoch that starts at a later step)."""
        return {
            name: [
                {key: epoch.get(key) for key in EPOCH_KEYS} for epoch in job.coordinator.epochs()
            ]
            for name, job in self.jobs.items()
        }


__all__ = ["EPOCH_KEYS", "DriverRunner", "block_row"]
