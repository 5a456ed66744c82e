"""No silent loss at zero nodes (#26): when the last rank leaves holding the only copy of the
job's state and cannot save it, the save is retried, the driver is told, and the next group's
resume says which step it starts from and how far that is behind; so does a resume after every
rank was lost without saving.

The first rank runs in its own process, because its disk is made full with a process-wide
limit: from a given step on it may not grow any file (``RLIMIT_FSIZE`` of 0, so every write
fails with ``EFBIG`` as it does with ``ENOSPC`` on a full disk; the test itself runs as root,
which no read-only folder stops), or because it is SIGKILLed. The coordinator and the second
group's rank run in the test process; nothing of ours is mocked.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from apps.digits import train_elastic
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.rank import RankOutcome, RankSettings, RankSpec, run_rank
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost

REPO = Path(__file__).resolve().parents[2]
POLICY = {"job": "digits", "campaign": "faults"}
SETTINGS = {"checkpoint_every": 10, "keep_checkpoints": 5}
TRAINING = {"epochs": 50, "batch_size": 64, "step_delay_s": 0.02}

_FIRST_RANK = textwrap.dedent(
    """
    import json, logging, resource, signal, sys, threading
    from apps.digits import train_elastic
    from parsl_malleable.elastic.rank import RankSettings, RankSpec, run_rank

    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")

    class Faulty:
        # The rank's context; during step ``at`` the disk becomes full for this process
        # (fault "full"), or the rank stops there, its commit of the step before reported
        # (fault "stall": the test then kills it).
        def __init__(self, ctx, fault, at):
            self._ctx, self._fault, self._at, self._steps = ctx, fault, at, 0

        def __getattr__(self, name):
            return getattr(self._ctx, name)

        def allreduce_gradients(self, *args, **kwargs):
            self._steps += 1
            if self._steps == self._at and self._fault == "full":
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
                print("disk full", flush=True)
            if self._steps == self._at and self._fault == "stall":
                print("stalled", flush=True)
                threading.Event().wait()
            self._ctx.allreduce_gradients(*args, **kwargs)

    def train(ctx, fault, at, **kwargs):
        return train_elastic(Faulty(ctx, fault, at), **kwargs)

    host, port, token, directory, settings, training, fault = sys.argv[1:8]
    spec = RankSpec(
        host, int(port), token, RankSettings(checkpoint_dir=directory, **json.loads(settings)),
        member_id="first",
    )
    outcome = run_rank(spec, train, (), {"fault": fault, "at": 13, **json.loads(training)})
    print("outcome", outcome.status, flush=True)
    """
)


def _start_first_rank(
    coordinator: Coordinator, directory: Path, fault: str, training: dict[str, Any] = TRAINING
) -> subprocess.Popen[str]:
    """The first group's only rank, which meets ``fault`` (``full``, ``stall``) at step 13."""
    host, port = coordinator.address
    argv = [host, str(port), coordinator.token, str(directory)]
    argv += [json.dumps(SETTINGS), json.dumps(training)]
    argv.append(fault)
    return subprocess.Popen(
        [sys.executable, "-c", _FIRST_RANK, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_line(process: subprocess.Popen[str], wanted: str) -> None:
    """Read ``process``'s output up to the line ``wanted`` (what it prints when it gets there)."""
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.strip() == wanted:
            return
    raise AssertionError(f"no {wanted!r} line: " + "".join(seen)[-3000:])


def _second_rank(coordinator: Coordinator, directory: Path, box: list[object]) -> None:
    host, port = coordinator.address
    settings = RankSettings(checkpoint_dir=str(directory), **SETTINGS)
    spec = RankSpec(host, port, coordinator.token, settings, member_id="second")
    try:
        box.append(run_rank(spec, train_elastic, (), TRAINING))
    except BaseException as exc:  # the error a Parsl task would carry
        box.append(exc)


def test_a_failed_final_save_at_zero_nodes_is_retried_reported_and_the_resume_says_its_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "ckpt"
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0, checkpoint_policy=POLICY)
    coordinator.start()
    first = _start_first_rank(coordinator, directory, "full")
    second: threading.Thread | None = None
    box: list[object] = []
    try:
        _wait_for_line(first, "disk full")
        # Its node goes: it leaves at its next commit, the only holder of the job's state.
        assert coordinator.drain(member_ids=["first"]) == ["first"]
        rest, _ = first.communicate(timeout=120)

        # Retried, then given up, on the rank ...
        attempts = re.findall(
            r"checkpoint not written, (attempt \d of 3, retrying|giving up)", rest
        )
        assert attempts == ["attempt 1 of 3, retrying", "attempt 2 of 3, retrying", "giving up"]
        assert rest.splitlines()[-1] == "outcome left", rest[-3000:]
        # ... and reported to the driver: which commit was lost, why, and what is left.
        (lost,) = coordinator.warnings()
        found = re.match(r"the job's newest commit, step (\d+), was not saved when its last", lost)
        assert found, lost
        committed = int(found.group(1))
        assert committed >= 13
        assert "3 attempts failed, the last: could not write the checkpoint of step" in lost
        assert "File too large" in lost
        assert lost.endswith("the next group resumes from step 10, the newest checkpoint on disk")
        left = [e for e in coordinator.events() if e["event"] == "left"]
        assert [e["saved_step"] for e in left] == [None]

        # The next group (no rank holds state) resumes from disk and says from which step.
        with caplog.at_level(logging.INFO, logger="parsl_malleable.elastic.rank"):
            second = threading.Thread(target=_second_rank, args=(coordinator, directory, box))
            second.start()
            assert coordinator.wait_for(lambda c: len(c.warnings()) == 2, 120), c_state(coordinator)
            assert coordinator.wait_for(lambda c: c.resumed_at(1), 60), c_state(coordinator)
        resumed = coordinator.warnings()[1]
        assert resumed == (
            f"resuming from the disk checkpoint of step 10 in {directory}, behind step "
            f"{committed} that this job had committed: steps 11-{committed} are trained again"
        )
        assert f"resuming from the disk checkpoint of step 10 in {directory}" in caplog.text
        assert coordinator.epochs()[-1]["start_step"] == 11
    finally:
        coordinator.abort("the test is over")
        first.kill()
        first.wait()
        if second is not None:
            second.join(timeout=120)
        coordinator.close()
    assert box and isinstance(box[0], RankOutcome) and box[0].status == "exited", box


def c_state(coordinator: Coordinator) -> str:
    """What the coordinator holds, for an assertion's message."""
    return f"warnings {coordinator.warnings()}; epochs {coordinator.epochs()}"


def test_a_resume_after_every_rank_was_lost_says_it_is_behind_the_last_commit(
    tmp_path: Path,
) -> None:
    """The only rank is SIGKILLed after it reported the commit of step 12 (so no save at all):
    the next group resumes from the periodic checkpoint of step 10 and the driver hears it."""
    directory = tmp_path / "ckpt"
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0, checkpoint_policy=POLICY)
    coordinator.start()
    first = _start_first_rank(coordinator, directory, "stall")
    second: threading.Thread | None = None
    box: list[object] = []
    try:
        _wait_for_line(first, "stalled")  # in step 13: the poll of commit 12 came back
        assert coordinator.last_step() == 12
        first.kill()
        first.wait()
        assert coordinator.wait_for(lambda c: c.running_world_size() == 0, 60)
        second = threading.Thread(target=_second_rank, args=(coordinator, directory, box))
        second.start()
        assert coordinator.wait_for(lambda c: bool(c.warnings()), 120), c_state(coordinator)
        assert coordinator.warnings() == [
            f"resuming from the disk checkpoint of step 10 in {directory}, behind step 12 that "
            f"this job had committed: steps 11-12 are trained again"
        ]
    finally:
        coordinator.abort("the test is over")
        first.kill()
        first.wait()
        if second is not None:
            second.join(timeout=120)
        coordinator.close()
    assert box and isinstance(box[0], RankOutcome) and box[0].status == "exited", box


def test_a_final_checkpoint_that_cannot_be_written_after_training_is_retried_and_reported(
    tmp_path: Path,
) -> None:
    """Training ends (22 steps) after the disk filled at step 13: the result stands, and the
    driver hears that the folder ends at the periodic checkpoint of step 10."""
    directory = tmp_path / "ckpt"
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0, checkpoint_policy=POLICY)
    coordinator.start()
    first = _start_first_rank(coordinator, directory, "full", {"epochs": 1, "batch_size": 64})
    try:
        output, _ = first.communicate(timeout=120)
    finally:
        first.kill()
        first.wait()
        coordinator.close()
    assert output.splitlines()[-1] == "outcome finished", output[-3000:]
    assert output.count("checkpoint not written, attempt") == 2 and "giving up" in output
    assert coordinator.outcome == "done"
    (warning,) = coordinator.warnings()
    assert warning.startswith("the final checkpoint, step 22, was not written (3 attempts failed")
    assert warning.endswith(f"the result stands, but {directory} ends at step 10")
