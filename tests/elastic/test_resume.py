"""Resuming from disk when no rank is left: newest good checkpoint used, other models and other
jobs refused, another job's taken only as an explicit warm start.

Ranks run as threads of the test process (a group of one), which is enough to exercise the
runtime's disk path end to end without starting processes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from apps.digits import train_elastic
from parsl_malleable.elastic.checkpoint import CheckpointStore
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.rank import RankOutcome, RankSettings, RankSpec, run_rank
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.errors import CheckpointError


def _run_job(
    ckpt: Path, policy: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[Coordinator, RankOutcome | BaseException]:
    """Train ``apps.digits`` to the end on one rank; ``policy``: the checkpoint policy the
    coordinator hands the rank (job, campaign, warm_start_from), as a malleable app's does."""
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0, checkpoint_policy=policy)
    coordinator.start()
    host, port = coordinator.address
    settings = RankSettings(checkpoint_dir=str(ckpt), checkpoint_every=10, keep_checkpoints=5)
    spec = RankSpec(host, port, coordinator.token, settings)
    box: list[RankOutcome | BaseException] = []

    def rank() -> None:
        try:
            box.append(run_rank(spec, train_elastic, (), kwargs))
        except BaseException as exc:  # the error a Parsl task would carry
            box.append(exc)

    thread = threading.Thread(target=rank)
    thread.start()
    thread.join(timeout=120)
    coordinator.close()
    assert box, "rank did not finish"
    return coordinator, box[0]


def test_truncated_newest_checkpoint_falls_back_to_previous_good_one(tmp_path):
    _, first = _run_job(tmp_path, epochs=1, batch_size=64)  # 22 steps: saves 10, 20, 22
    assert isinstance(first, RankOutcome) and first.status == "finished"
    store = CheckpointStore(tmp_path, keep=5)
    steps = [info.step for info in store.list()]
    assert steps == [10, 20, 22]
    newest = store.list()[-1].path
    newest.write_bytes(newest.read_bytes()[:100])  # a crash mid-copy, a full disk

    coordinator, second = _run_job(tmp_path, epochs=2, batch_size=64)
    assert isinstance(second, RankOutcome) and second.status == "finished"
    assert coordinator.epochs()[0]["start_step"] == 21  # resumed after step 20, not 0 or 22
    # The driver hears of the fallback (ElasticJob.warnings reads this), not just the block's
    # stderr: which checkpoint was skipped, why, and where the job resumed.
    (warning,) = coordinator.warnings()
    assert warning.startswith("resuming from step 20: skipped 1 damaged checkpoint(s) in ")
    assert "ckpt-000000000022.pt: 100 bytes on disk" in warning and "truncated" in warning
    # The sample counter travelled in the checkpoint: two epochs, each sample once per epoch.
    assert second.value["samples_seen"] == 2 * 1347


def test_checkpoint_of_another_model_is_refused_with_both_fingerprints(tmp_path):
    _, first = _run_job(tmp_path, epochs=1, batch_size=128, hidden=(32,))
    assert isinstance(first, RankOutcome)
    coordinator, second = _run_job(tmp_path, epochs=1, batch_size=128, hidden=(48,))
    assert isinstance(second, CheckpointError)
    assert "fingerprint" in str(second)
    assert coordinator.outcome == "aborted"
    assert "CheckpointError" in (coordinator.abort_message or "")


def test_a_checkpoint_of_another_job_is_refused_and_a_warm_start_takes_it_explicitly(tmp_path):
    theirs = tmp_path / "lr-0.1"
    _, first = _run_job(theirs, {"job": "lr-0.1"}, epochs=1, batch_size=64)  # saves 10, 20, 22
    assert isinstance(first, RankOutcome) and first.status == "finished"

    # Another job pointed at that folder (the same architecture): refused, naming the job.
    coordinator, second = _run_job(theirs, {"job": "lr-0.01"}, epochs=2, batch_size=64)
    assert isinstance(second, CheckpointError)
    assert "belongs to job 'lr-0.1', not to this job 'lr-0.01'" in str(second)
    assert "warm_start_from=" in str(second) and coordinator.outcome == "aborted"

    # The explicit warm start: its own folder is empty, so it starts from theirs, whole.
    ours = tmp_path / "lr-0.01"
    policy = {"job": "lr-0.01", "warm_start_from": str(theirs)}
    coordinator, third = _run_job(ours, policy, epochs=2, batch_size=64)
    assert isinstance(third, RankOutcome) and third.status == "finished", third
    assert coordinator.epochs()[0]["start_step"] == 23  # after their step 22
    assert third.value["samples_seen"] == 2 * 1347  # their user field came along
    (warning,) = coordinator.warnings()
    assert warning.startswith("warm start: this job 'lr-0.01' starts from step 22 in ")
    assert "a checkpoint of job 'lr-0.1' (authenticated)" in warning
    assert [info.step for info in CheckpointStore(ours).list()] == [30, 40, 44]

    # Once it has checkpoints of its own, it resumes from those; the warm start is over.
    coordinator, fourth = _run_job(ours, policy, epochs=3, batch_size=64)
    assert isinstance(fourth, RankOutcome) and fourth.status == "finished", fourth
    assert coordinator.epochs()[0]["start_step"] == 45
    assert coordinator.warnings() == []


def test_a_warm_start_from_a_folder_without_a_checkpoint_fails_the_job(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    policy = {"job": "b", "warm_start_from": str(empty)}
    coordinator, outcome = _run_job(tmp_path / "b", policy, epochs=1, batch_size=128)
    assert isinstance(outcome, CheckpointError)
    assert f"warm_start_from={str(empty)!r}: {empty} holds no usable checkpoint" in str(outcome)
    assert coordinator.outcome == "aborted"


def test_the_driver_and_the_rank_say_the_same_resume_step_when_every_checkpoint_is_damaged(
    tmp_path, caplog
):
    """The driver's campaign.log line comes from resume_step, the rank's from its own load:
    both say scratch, with the count of damaged checkpoints (the driver used to trust any
    manifest and say "resumes from step 22" while the rank started over)."""
    import logging

    from parsl_malleable.campaign.runner import latest_checkpoint_step
    from parsl_malleable.elastic.checkpoint import resume_step

    job = "digits-a"
    folder = tmp_path / job
    policy = {"job": job, "campaign": "", "warm_start_from": None}
    _, first = _run_job(folder, policy, epochs=1, batch_size=64)  # saves 10, 20, 22
    assert isinstance(first, RankOutcome) and first.status == "finished"
    assert resume_step(folder, job=job).step == 22
    for info in CheckpointStore(folder).list():
        info.path.write_bytes(info.path.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="parsl_malleable"):
        assert latest_checkpoint_step(folder) is None
    driver = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("job "))
    assert driver.startswith(f"job {job} starts from scratch: skipped 3 damaged checkpoint(s) in")
    coordinator, second = _run_job(folder, policy, epochs=1, batch_size=64)
    assert isinstance(second, RankOutcome) and second.status == "finished"
    assert coordinator.epochs()[0]["start_step"] == 1  # it did start over
    (warning,) = coordinator.warnings()
    assert warning == "resuming from " + driver.removeprefix(f"job {job} starts from ")
