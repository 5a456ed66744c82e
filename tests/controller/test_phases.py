"""The phase log: first stamps win, the latest last step wins, training time from epochs."""

from __future__ import annotations

import pytest

from parsl_malleable.controller.phases import (
    BlockPhase,
    EpochReader,
    MemberPlace,
    PhaseLog,
    percentile,
    rescale_pauses,
)


def test_first_stamp_wins_and_last_step_takes_the_latest() -> None:
    log = PhaseLog()
    assert log.record("1/42", BlockPhase.SUBMITTED, 10.0)
    assert not log.record("1/42", BlockPhase.SUBMITTED, 11.0)
    assert log.record("1/42", BlockPhase.LAST_STEP, 20.0, node="n1")
    assert log.record("1/42", BlockPhase.LAST_STEP, 25.0, node="n1")
    assert not log.record("1/42", BlockPhase.LAST_STEP, 22.0, node="n1")
    assert log.record("1/42", BlockPhase.LAST_STEP, 21.0, node="n2")  # another node
    stamps = {(e.phase, e.node): e.time for e in log.events("1/42")}
    assert stamps == {
        (BlockPhase.SUBMITTED, ""): 10.0,
        (BlockPhase.LAST_STEP, "n1"): 25.0,
        (BlockPhase.LAST_STEP, "n2"): 21.0,
    }


def test_the_oldest_block_is_dropped_past_the_limit() -> None:
    log = PhaseLog(limit=3)
    log.record("old", BlockPhase.SUBMITTED, 1.0)
    log.record("old", BlockPhase.RUNNING, 2.0)
    log.add_training("old", "n1", 5.0)
    log.record("new", BlockPhase.SUBMITTED, 3.0)
    log.record("new", BlockPhase.RUNNING, 4.0)
    assert {e.block for e in log.events()} == {"new"}
    assert log.training_s() == 0.0


def coordinator_events() -> list[dict]:
    """Two members join; epoch 1 (a alone) trains 10-20 s, epoch 2 (a, b) 21-31 s; b leaves."""
    return [
        {"time": 5.0, "event": "registered", "member": "a"},
        {"time": 8.0, "event": "joined", "member": "a"},
        {"time": 9.0, "event": "formed", "epoch": 1, "world_size": 1, "members": ["a"]},
        {"time": 10.0, "event": "resumed", "epoch": 1, "world_size": 1, "step": 0},
        {"time": 19.0, "event": "joined", "member": "b"},
        {"time": 20.0, "event": "formed", "epoch": 2, "world_size": 2, "members": ["a", "b"]},
        {"time": 21.0, "event": "resumed", "epoch": 2, "world_size": 2, "step": 40},
        {"time": 31.0, "event": "drain", "members": ["b"]},
        {"time": 31.5, "event": "formed", "epoch": 3, "world_size": 1, "members": ["a"]},
        {"time": 31.6, "event": "left", "member": "b", "saved_step": None},
    ]


def test_epochs_become_phases_and_training_time() -> None:
    log = PhaseLog()
    places = {"a": MemberPlace("1/41", "n1", "job"), "b": MemberPlace("2/42", "n2", "job")}
    reader = EpochReader("job", log, places)
    events = coordinator_events()
    reader.feed(events[:5])
    reader.feed(events[5:])
    assert reader.fed == len(events)
    stamps = {(e.block, e.phase): e.time for e in log.events()}
    assert stamps[("1/41", BlockPhase.JOINED)] == 8.0
    assert stamps[("1/41", BlockPhase.FIRST_STEP)] == 10.0
    assert stamps[("2/42", BlockPhase.JOINED)] == 19.0
    assert stamps[("2/42", BlockPhase.FIRST_STEP)] == 21.0
    assert stamps[("2/42", BlockPhase.LAST_STEP)] == 31.6
    # a: 10-20 and 21-31.5; b: 21-31.5. Epoch 3 has not resumed: nothing counts after 31.5.
    assert log.training_s("1/41") == pytest.approx(20.5)
    assert log.training_s("2/42") == pytest.approx(10.5)
    reader.flush(40.0)
    assert log.training_s() == pytest.approx(31.0)


def test_a_lost_rank_ends_its_training_where_it_was_lost_and_says_why() -> None:
    """A frozen rank marked lost, sent away when it wakes: its ``left`` comes later, but its
    training ended at the loss, and the phase log says why."""
    log = PhaseLog()
    places = {"a": MemberPlace("1/41", "n1", "job"), "b": MemberPlace("2/42", "n2", "job")}
    reader = EpochReader("job", log, places)
    reader.feed(coordinator_events()[:7])  # a and b train from 21 s
    reader.feed([
        {"time": 40.0, "event": "lost", "member": "b", "why": "no heartbeat for 10.0 s"},
        {"time": 95.0, "event": "sent_away", "member": "b"},
        {"time": 95.1, "event": "left", "member": "b", "saved_step": None},
    ])  # fmt: skip
    (end,) = [e for e in log.events("2/42") if e.phase is BlockPhase.LAST_STEP]
    assert (end.time, end.why) == (40.0, "lost: no heartbeat for 10.0 s")


def test_a_running_epoch_counts_up_to_each_flush() -> None:
    log = PhaseLog()
    reader = EpochReader("job", log, {"a": MemberPlace("1/41", "n1", "job")})
    reader.feed(coordinator_events()[:4])
    reader.flush(15.0)
    assert log.training_s() == pytest.approx(5.0)
    reader.flush(18.0)
    assert log.training_s() == pytest.approx(8.0)
    reader.feed([{"time": 20.0, "event": "finished", "member": "a", "step": 99}])
    assert log.training_s() == pytest.approx(10.0)
    assert [e.time for e in log.events() if e.phase is BlockPhase.LAST_STEP] == [20.0]


def test_startups_give_each_phase_gap_per_node() -> None:
    log = PhaseLog()
    log.record("1/41", BlockPhase.SUBMITTED, 100.0)
    log.record("1/41", BlockPhase.RUNNING, 100.5)
    log.record("1/41", BlockPhase.WORKER, 103.5, node="n1")
    log.record("1/41", BlockPhase.JOINED, 105.0, node="n1")
    log.record("1/41", BlockPhase.FIRST_STEP, 105.6, node="n1")
    log.record("1/41", BlockPhase.WORKER, 104.0, node="n2")  # not trained yet: no row
    (row,) = log.startups()
    assert log.first_steps() == 1
    assert row.node == "n1"
    assert row.gaps() == pytest.approx(
        {
            "submit->running": 0.5,
            "running->worker": 3.0,
            "worker->joined": 1.5,
            "joined->first step": 0.6,
        }
    )


def test_rescale_pauses_from_epochs() -> None:
    epochs = [
        {"world_size": 1, "formed_at": 9.0, "resumed_at": 10.0, "progress_at": 19.8},
        {"world_size": 2, "formed_at": 20.0, "resumed_at": 20.4, "progress_at": 29.9},
        {"world_size": 1, "formed_at": 30.0, "resumed_at": 30.2, "progress_at": None},
        {"world_size": 1, "formed_at": 40.0, "resumed_at": None},  # never resumed: no pause
        {"world_size": 2, "formed_at": 41.0, "resumed_at": 41.5},
    ]
    assert rescale_pauses(epochs) == [
        ("up", pytest.approx(0.6)),  # from the last step at 19.8 s
        ("down", pytest.approx(0.3)),
        ("up", pytest.approx(0.5)),  # the last step before is unknown: from the forming
    ]


def test_percentile() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 0.5) == pytest.approx(5.5)
    assert percentile(values, 0.9) == pytest.approx(9.1)
    assert percentile([3.0], 0.9) == 3.0
