"""TensorBoard event files of a campaign's reported metrics, when ``tensorboard`` is installed
(the ``tensorboard`` extra): ``tensorboard/<job>/`` holds one run per job, a scalar per metric
at each reported step, with the time it was reported.

The files are rewritten from the state store at the end of every run, not appended while
training: a rollback or a resume replaces reports of steps that were trained again
(:mod:`~parsl_malleable.elastic.metric_book`), and an event file cannot take a value back, so
only the committed timeline is written. ``tensorboard --logdir OUTPUT/tensorboard`` shows every
job's curves side by side.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
from pathlib import Path
from typing import Any

from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.private_files import private_dir

logger = logging.getLogger(__name__)

FOLDER = "tensorboard"
_NOT_METRICS = {"job", "step", "time", "run"}


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` can write event files here."""
    return (
        importlib.util.find_spec("tensorboard") is not None
        and importlib.util.find_spec("torch") is not None
    )


def write_event_files(store: CampaignStore, output: Path) -> list[Path]:
    """Rewrite ``output/tensorboard/<job>/`` for every job that reported metrics; the job
    folders written (none when nothing was reported or ``tensorboard`` is not installed)."""
    rows = store.metrics()
    if not rows:
        return []
    if not tensorboard_available():
        logger.debug("tensorboard is not installed: no event files (pip install tensorboard)")
        return []
    from torch.utils.tensorboard import SummaryWriter

    root = private_dir(output / FOLDER, what="TensorBoard folder")
    by_job: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_job.setdefault(str(row["job"]), []).append(row)
    written = []
    for job, reports in by_job.items():
        folder = root / job
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)  # the last run's files: their timeline may have changed
        writer = SummaryWriter(log_dir=str(private_dir(folder, what="TensorBoard folder")))
        try:
            for report in reports:
                for name, value in report.items():
                    # A row holds only the metrics reported at its step; NaN was reported.
                    if name in _NOT_METRICS or not isinstance(value, float | int):
                        continue
                    writer.add_scalar(
                        name, value, global_step=int(report["step"]), walltime=report["time"]
                    )
        finally:
            writer.close()
        written.append(folder)
    return written


__all__ = ["FOLDER", "tensorboard_available", "write_event_files"]
