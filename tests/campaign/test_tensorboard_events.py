"""TensorBoard event files hold each job's committed timeline of reports, read back with
TensorBoard's own reader; without tensorboard installed nothing is written."""

from __future__ import annotations

import math
import stat
from pathlib import Path

import pytest

from parsl_malleable.campaign import tensorboard_events
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.elastic.metric_book import MetricRecord

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)


def _store(tmp_path: Path) -> CampaignStore:
    store = CampaignStore(tmp_path)
    first = [MetricRecord(s, 1000.0 + s, {"loss": 1.0 / s, "acc": 0.1 * s}) for s in (1, 2, 3)]
    store.record_metrics("hpo-0", 1, None, first)
    # A resume from step 2: step 3 of the first timeline is void, then trained again.
    store.record_metrics("hpo-0", 2, 2, [MetricRecord(3, 2000.0, {"loss": 0.25, "acc": 0.5})])
    store.record_metrics("hpo-1", 1, None, [MetricRecord(5, 1005.0, {"loss": math.nan})])
    return store


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def test_event_files_hold_the_committed_reports_of_each_job(tmp_path: Path) -> None:
    store = _store(tmp_path)
    written = tensorboard_events.write_event_files(store, tmp_path)
    assert sorted(p.name for p in written) == ["hpo-0", "hpo-1"]
    hpo0 = _scalars(tmp_path / "tensorboard" / "hpo-0")
    assert hpo0["loss"] == [(1, 1.0), (2, 0.5), (3, 0.25)]
    assert [s for s, _ in hpo0["acc"]] == [1, 2, 3] and hpo0["acc"][2][1] == 0.5
    hpo1 = _scalars(tmp_path / "tensorboard" / "hpo-1")
    assert [s for s, _ in hpo1["loss"]] == [5] and math.isnan(hpo1["loss"][0][1])
    assert stat.S_IMODE((tmp_path / "tensorboard").stat().st_mode) == 0o700
    # A second run rewrites the files from the store: no step appears twice.
    store.record_metrics("hpo-0", 3, 1, [MetricRecord(2, 3000.0, {"loss": 0.4})])
    tensorboard_events.write_event_files(store, tmp_path)
    hpo0 = _scalars(tmp_path / "tensorboard" / "hpo-0")
    assert hpo0["loss"] == [(1, 1.0), (2, pytest.approx(0.4))]
    store.close()


def test_without_tensorboard_no_event_files_are_written(tmp_path: Path, monkeypatch) -> None:
    store = _store(tmp_path)
    monkeypatch.setattr(tensorboard_events, "tensorboard_available", lambda: False)
    assert tensorboard_events.write_event_files(store, tmp_path) == []
    assert not (tmp_path / "tensorboard").exists()
    store.close()
