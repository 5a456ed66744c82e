"""The merge rule of reported metrics (rollbacks, resumes, stale epochs), their limits, and the
``metrics`` / ``timeline`` requests on a real coordinator."""

from __future__ import annotations

import math

import pytest

from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.metric_book import MetricBook, check_metrics
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.wire import RequestClient
from tests.elastic.raw_requests import request


def _steps(book: MetricBook) -> dict[int, float]:
    return {r.step: r.values["v"] for r in book.records()}


def test_a_rollback_drops_the_abandoned_steps_and_the_retrained_ones_replace_them() -> None:
    book = MetricBook()
    book.timeline(1, 0)
    for step in range(1, 8):
        book.add(1, step, {"v": 1.0 * step})
    # A peer is lost; the new group starts from commit 5: 6 and 7 were never committed.
    book.timeline(2, 5)
    assert sorted(_steps(book)) == [1, 2, 3, 4, 5]
    book.add(2, 6, {"v": 60.0})
    assert _steps(book)[6] == 60.0 and 7 not in _steps(book)
    # A resume from an older disk checkpoint (step 3) re-trains 4.. on another timeline.
    book.timeline(3, 3)
    book.add(3, 4, {"v": 400.0})
    assert _steps(book) == {1: 1.0, 2: 2.0, 3: 3.0, 4: 400.0}
    assert book.counts()["dropped"] == 2 + 3


def test_reports_and_marks_of_an_older_epoch_are_dropped_and_counted() -> None:
    book = MetricBook()
    book.timeline(2, 0)
    book.add(2, 1, {"v": 1.0})
    assert not book.add(1, 2, {"v": 9.0})  # a slow rank of a replaced group
    assert not book.timeline(1, 0)
    assert _steps(book) == {1: 1.0}
    assert book.counts()["stale"] == 2


def test_take_gives_the_cut_and_only_the_surviving_changes() -> None:
    book = MetricBook()
    book.timeline(1, 0)
    for step in (1, 2, 3):
        book.add(1, step, {"v": float(step)})
    first = book.take()
    assert first.cut == 0 and [r.step for r in first.records] == [1, 2, 3]
    book.timeline(2, 10)  # nothing above 10 stored
    book.add(2, 11, {"v": 11.0})
    book.add(2, 12, {"v": 12.0})
    book.timeline(3, 2)  # drops 3, 11, 12; the consumer must drop its 3 too
    book.add(3, 3, {"v": 33.0})
    second = book.take()
    assert second.cut == 2
    assert [(r.step, r.values["v"]) for r in second.records] == [(3, 33.0)]
    empty = book.take()
    assert empty.cut is None and empty.records == []


def test_the_book_keeps_the_newest_reports_and_counts_what_it_evicts() -> None:
    book = MetricBook(max_reports=3)
    for step in range(1, 6):
        book.add(1, step, {"v": float(step)})
    assert sorted(_steps(book)) == [3, 4, 5]
    assert book.counts()["evicted"] == 2


def test_non_finite_values_are_kept_and_counted() -> None:
    book = MetricBook()
    book.add(1, 1, {"v": math.nan, "w": math.inf})
    (record,) = book.records()
    assert math.isnan(record.values["v"]) and record.values["w"] == math.inf
    assert book.counts()["nonfinite"] == 2


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({}, "at least one metric"),
        ({f"m{i}": 1.0 for i in range(17)}, "at most 16"),
        ({"x" * 65: 1.0}, "metric name"),
        ({"1st": 1.0}, "metric name"),
        ({"acc": "0.9"}, "acc='0.9': a number is needed"),
        ({"acc": True}, "acc=True"),
        ({"acc": [0.9]}, "a number is needed"),
    ],
)
def test_bad_reports_are_refused_naming_what_is_wrong(values: dict, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_metrics(values)
    assert says in str(caught.value)


def test_a_tensor_and_an_int_are_numbers() -> None:
    import torch

    assert check_metrics({"loss": torch.tensor(0.5), "n": 3}) == {"loss": 0.5, "n": 3.0}


def test_the_coordinator_keeps_reports_and_refuses_malformed_ones() -> None:
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0)
    coordinator.start()
    client = RequestClient(*coordinator.address, coordinator.token)
    try:
        request(client, "register", member="r0")
        request(client, "timeline", member="r0", epoch=1, base=0)
        request(client, "metrics", member="r0", epoch=1, step=1, values={"acc": 0.5})
        request(client, "metrics", member="r0", epoch=1, step=2, values={"acc": math.nan})
        request(client, "timeline", member="r0", epoch=2, base=1)
        assert request(client, "metrics", member="r0", epoch=1, step=2, values={"acc": 0.1})[
            "stale"
        ]
        for bad in ({"acc": "x"}, {}, {f"m{i}": 1.0 for i in range(17)}, {"a b": 1.0}):
            with pytest.raises(MalleableError, match="bad 'metrics' request"):
                request(client, "metrics", member="r0", epoch=2, step=3, values=bad)
        request(client, "metrics", member="r0", epoch=2, step=2, values={"acc": 0.75})
        rows = [r.as_dict() for r in coordinator.metric_records()]
        assert [(r["step"], r["acc"]) for r in rows] == [(1, 0.5), (2, 0.75)]
        counts = coordinator.metric_counts()
        assert counts["stale"] == 1 and counts["nonfinite"] == 1 and counts["dropped"] == 1
    finally:
        client.close()
        coordinator.close()
