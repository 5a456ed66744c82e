"""The scheduler of a site profile, and the native-queue signature the provider watches.

The scheduler classes themselves live in :mod:`parsl_malleable.schedulers`: one base class
(:class:`~parsl_malleable.schedulers.base.BlockScheduler`) and one file per batch system
(Slurm, PBS, the emulated site), each built from a profile by its ``from_profile``. This
module only picks the class by ``profile.scheduler``: no scheduler is a special case.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.schedulers.base import OURS_PREFIX, BlockScheduler
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.slurm import SlurmScheduler, queue_signature_of
from parsl_malleable.snapshot import Snapshot

logger = logging.getLogger(__name__)

SCHEDULERS: dict[str, type[BlockScheduler]] = {
    "slurm": SlurmScheduler,
    "pbs": PBSScheduler,
    "emulated": EmulatedSite,
}


def make_scheduler(profile: SiteProfile, env: Mapping[str, str] | None = None) -> BlockScheduler:
    """The :class:`BlockScheduler` for ``profile.scheduler``; ``env`` is added to every
    command's environment (``SLURM_CONF``, a ``PATH`` with wrappers...)."""
    try:
        kind = SCHEDULERS[profile.scheduler]
    except KeyError:
        raise ConfigError(f"{profile.name}: unknown scheduler {profile.scheduler!r}") from None
    logger.info("profile %s: scheduler %s (%s)", profile.name, profile.scheduler, kind.__name__)
    return kind.from_profile(profile, env)


def snapshot_signature(snapshot: Snapshot) -> frozenset[tuple[str, str]]:
    """The queue signature (:func:`queue_signature_of`) from a snapshot, to compare the
    first watch after a poll with. Ids are cut at their first dot: a PBS id's sequence number
    (``1234567.polaris-pbs-01...``), which plain qstat prints whole where it cuts the rest;
    a Slurm id has no dot."""
    running = {(_short(j.job_id), "R") for j in snapshot.running if not j.ours}
    pending = {(_short(j.job_id), "PD") for j in snapshot.pending if not j.ours}
    return frozenset(running | pending)


def _short(job_id: str) -> str:
    return job_id.split(".", 1)[0]


__all__ = [
    "OURS_PREFIX",
    "SCHEDULERS",
    "BlockScheduler",
    "make_scheduler",
    "queue_signature_of",
    "snapshot_signature",
]
