"""Scheduler command faults on the real Slurm cluster: after each, the cluster holds exactly
the blocks the provider tracks, within one poll.

The faults come from stand-in ``sbatch``/``squeue``/``scancel`` scripts first on the
provider's PATH, which run the real command and then misbehave as a loaded or broken Slurm
does: a reply lost after the job was created, a hang past the command timeout, a reply with no
id, a cut-off id, an empty job list while blocks run, a failing cancel, a refusing site. The
test itself reads the cluster with the real commands.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.provider import BackfillProvider

from .conftest import Natives, job_states, run_slurm, wait_for

pytestmark = pytest.mark.slurm

Make = Callable[..., BackfillProvider]

# Each stand-in reads its mode from a file the test writes; "ok" runs the real command.
FAULTS = {
    "sbatch": """
case " $* " in *" --test-only "*) [ "$mode" = refuse ] || exec "$real" "$@";; esac
case "$mode" in
  lost-reply) "$real" "$@" >/dev/null
      echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1;;
  hang) "$real" "$@" >/dev/null; exec sleep 60;;
  no-id) "$real" "$@" >/dev/null; echo "Submitted"; exit 0;;
  cut-id) id=$("$real" "$@") || exit 1; echo "${id%?}"; exit 0;;
  say) "$real" "$@" >/dev/null || exit 1; cat "$reply"; exit 0;;
  refuse) echo "sbatch: error: Batch job submission failed: Invalid user for SlurmUser slurm" >&2
      exit 1;;
esac""",
    "squeue": """
case "$mode" in
  empty) exit 0;;
  no-name) case " $* " in *" --name="*)
      echo "squeue: error: Invalid user for SlurmUser slurm" >&2; exit 1;; esac;;
esac""",
    "scancel": """
case "$mode" in
  fail) echo "scancel: error: Kill job error on job id $1: Access/permission denied" >&2
      exit 1;;
esac""",
}


class Faults:
    """Stand-in commands in ``bin/``, their modes, and a log of every call."""

    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "calls.log"
        self.calls.touch()
        for name, body in FAULTS.items():
            real = shutil.which(name)
            assert real, f"{name} is not on PATH"
            mode = tmp_path / f"{name}.mode"
            mode.write_text("ok")
            script = self.bin / name
            script.write_text(
                "#!/bin/sh\n"
                f"real={real}\nreply={tmp_path / f'{name}.reply'}\n"
                f'mode=$(cat {mode})\necho "{name} $*" >> {self.calls}\n{body}\nexec "$real" "$@"\n'
            )
            script.chmod(0o755)

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}"}

    def set(self, command: str, mode: str) -> None:
        (self.bin.parent / f"{command}.mode").write_text(mode)

    def say(self, command: str, reply: str) -> None:
        """Run the real command, then print ``reply`` instead of its own reply."""
        (self.bin.parent / f"{command}.reply").write_text(reply)
        self.set(command, "say")

    def count(self, command: str) -> int:
        return sum(line.startswith(command + " ") for line in self.calls.read_text().splitlines())


@pytest.fixture
def faults(tmp_path: Path) -> Faults:
    return Faults(tmp_path)


def on_cluster(natives: Natives, tag: str) -> set[str]:
    """Ids of the jobs named with ``tag`` that are pending or running, read by real squeue."""
    out = run_slurm(natives.cluster, "squeue", "-h", "-t", "PD,CF,R,S", "-o", "%i %j")
    return {i for i, name in (row.split() for row in out.splitlines()) if name.startswith(tag)}


def tracked(provider: BackfillProvider) -> set[str]:
    return {b.job_id for b in provider.blocks()}


def make(
    providers: Make, natives: Natives, faults: Faults, **overrides: object
) -> BackfillProvider:
    env = {**natives.cluster.env, **faults.env}
    return providers(autostart=False, env=env, **overrides)


@pytest.mark.parametrize("mode", ["lost-reply", "hang", "no-id"])
def test_a_submit_that_fails_after_creating_the_job_adopts_it(
    natives: Natives, providers: Make, faults: Faults, mode: str
) -> None:
    provider = make(providers, natives, faults, command_timeout_s=3)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    faults.set("sbatch", mode)
    report = provider.poll_once()
    faults.set("sbatch", "ok")
    assert len(report.submitted) == 1, report
    assert on_cluster(natives, provider.tag) == tracked(provider) == set(report.submitted)
    # Submitted once: a lost reply is not retried into a second job.
    assert faults.count("sbatch") == 2  # the start test, the submit
    assert provider.stats()["faults"] == {"submit_adopted": 1}
    provider.poll_once()
    assert on_cluster(natives, provider.tag) == tracked(provider)


# What sbatch may print after it queued the job: its id cut off ("1" for "101"), the id of a
# job that is not ours, a small id that may be anyone's, garbage, nothing.
SBATCH_REPLIES = ["cut-off", "a native's id", "1", "Submitted batch job", ""]


@pytest.mark.parametrize("reply", SBATCH_REPLIES)
def test_whatever_sbatch_prints_the_cluster_holds_exactly_the_tracked_blocks(
    natives: Natives, providers: Make, faults: Faults, reply: str
) -> None:
    native = natives.submit("--nodes=1", "--time=10", "--job-name=native", "--wrap", "sleep 600")
    assert wait_for(lambda: job_states(natives.cluster, [native])[native][0] == "RUNNING", 30)
    provider = make(providers, natives, faults)
    for i in range(2):
        provider.submit("sleep 600", 1, f"parsl.htex.block-{i}")
    if reply == "cut-off":
        faults.set("sbatch", "cut-id")
    else:
        faults.say("sbatch", native if reply == "a native's id" else reply)
    report = provider.poll_once()
    faults.set("sbatch", "ok")
    assert report.error == "" and len(report.submitted) == 2, report
    # Checked by name at the submit: tracked right away, not a poll later.
    assert tracked(provider) == on_cluster(natives, provider.tag) == set(report.submitted)
    assert native not in tracked(provider)
    id_like = reply not in ("Submitted batch job", "")
    expected = {"id_repaired": 2} if id_like else {"submit_adopted": 2}
    assert provider.stats()["faults"] == expected
    provider.close()
    assert not on_cluster(natives, provider.tag)
    assert job_states(natives.cluster, [native])[native][0] == "RUNNING"  # never touched


def test_a_wrong_id_whose_check_fails_is_never_cancelled_and_close_ends_the_block(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    native = natives.submit("--nodes=1", "--time=10", "--job-name=native", "--wrap", "sleep 600")
    assert wait_for(lambda: job_states(natives.cluster, [native])[native][0] == "RUNNING", 30)
    provider = make(providers, natives, faults)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    faults.say("sbatch", native)
    faults.set("squeue", "no-name")  # the check by name fails too
    report = provider.poll_once()
    faults.set("sbatch", "ok")
    faults.set("squeue", "ok")
    assert report.submitted == [native] and provider.stats()["faults"] == {"id_unchecked": 1}
    assert len(on_cluster(natives, provider.tag)) == 1
    provider.close()  # the last snapshot finds the block by name: cancelled under its own id
    assert not on_cluster(natives, provider.tag)
    assert provider.stats()["faults"]["id_corrected"] == 1
    assert job_states(natives.cluster, [native])[native][0] == "RUNNING"
    cancels = [c for c in faults.calls.read_text().splitlines() if c.startswith("scancel ")]
    assert cancels and not any(native in c.split() for c in cancels), cancels


def test_a_cut_off_id_found_by_the_snapshot_is_corrected_and_cancelled_at_close(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    # Without the check at submit (as for a scheduler whose ids are not printed), the last
    # snapshot of close() finds the block by its name and cancels it under its real id.
    provider = make(providers, natives, faults)
    provider.scheduler.submit_ids_printed = False  # type: ignore[misc]
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    faults.set("sbatch", "cut-id")
    provider.poll_once()
    faults.set("sbatch", "ok")
    (job,) = on_cluster(natives, provider.tag)
    assert tracked(provider) != {job}
    provider.close()
    assert not on_cluster(natives, provider.tag)
    assert provider.stats()["faults"]["id_corrected"] == 1


def test_an_empty_job_list_drops_no_running_block_and_starts_none(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    provider = make(providers, natives, faults)
    for i in range(2):
        provider.submit("sleep 600", 1, f"parsl.htex.block-{i}")
    assert wait_for(lambda: provider.poll_once() and _running(provider) == 2, 30)
    before = tracked(provider)
    faults.set("squeue", "empty")
    for _ in range(3):
        report = provider.poll_once()
        assert report.submitted == [] and report.ended == [], report
    faults.set("squeue", "ok")
    assert tracked(provider) == before == on_cluster(natives, provider.tag)
    assert provider.stats()["faults"]["missing_kept"] >= 2


def test_a_stray_job_of_ours_is_cancelled_at_the_next_poll(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    provider = make(providers, natives, faults)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    provider.poll_once()
    stray = run_slurm(
        natives.cluster, "sbatch", "--parsable", "--partition=harvest", "--output=/dev/null",
        f"--job-name={provider.tag}-9-99", "--wrap", "sleep 600",
    ).strip()  # fmt: skip
    assert stray in on_cluster(natives, provider.tag)
    report = provider.poll_once()
    assert f"{stray}: stray job of ours, cancelled" in report.skipped
    assert on_cluster(natives, provider.tag) == tracked(provider)
    assert provider.stats()["faults"]["strays_cancelled"] == 1


def test_a_lost_reply_whose_lookup_fails_is_cancelled_at_the_next_poll(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    provider = make(providers, natives, faults)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    faults.set("sbatch", "lost-reply")
    faults.set("squeue", "no-name")
    report = provider.poll_once()
    faults.set("sbatch", "ok")
    assert report.submitted == [] and len(on_cluster(natives, provider.tag)) == 1
    assert provider.stats()["faults"]["submit_unsettled"] == 1
    provider.poll_once()  # the stray is cancelled; a new block fills the slot
    faults.set("squeue", "ok")
    assert on_cluster(natives, provider.tag) == tracked(provider)
    assert provider.stats()["faults"]["strays_cancelled"] == 1


def test_failing_cancels_back_off_and_succeed_when_scancel_does(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    provider = make(providers, natives, faults)
    slots = [provider.submit("sleep 600", 1, f"parsl.htex.block-{i}") for i in range(2)]
    assert wait_for(lambda: provider.poll_once() and _running(provider) == 2, 30)
    victim = next(b.job_id for b in provider.blocks() if b.slot_id == slots[0])
    faults.set("scancel", "fail")
    provider.start()  # the poll thread retries the cancel
    assert provider.cancel([slots[0]]) == [False]
    assert wait_for(lambda: provider.stats()["faults"].get("cancel_failed", 0) >= 4, 30)
    # Tried at 0, 1, 3 and 7 s: four calls, not the 70 that a retry every 0.1 s made.
    assert faults.count("scancel") <= 5
    faults.set("scancel", "ok")
    assert wait_for(lambda: victim not in on_cluster(natives, provider.tag), 30)
    assert victim in {r.job_id for r in provider.history()}
    assert on_cluster(natives, provider.tag) == tracked(provider) - {victim}


def test_a_refusing_site_is_a_warning_with_its_words_and_a_counter(
    natives: Natives, providers: Make, faults: Faults, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="parsl_malleable")
    tested = make(providers, natives, faults)
    untested = make(providers, natives, faults, test_start=False)
    for provider in (tested, untested):
        provider.submit("sleep 600", 1, "parsl.htex.block-0")
    faults.set("sbatch", "refuse")
    tested.poll_once()
    report = untested.poll_once()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("Invalid user for SlurmUser" in w for w in warnings) >= 2, warnings
    assert tested.stats()["faults"]["start_refused"] >= 1
    assert untested.stats()["faults"]["submit_failed"] == 1
    assert "Invalid user for SlurmUser" in untested.last_error
    assert report.submitted == [] and not on_cluster(natives, "pm-block")


def test_close_cancels_what_a_failed_submit_left(
    natives: Natives, providers: Make, faults: Faults
) -> None:
    provider = make(providers, natives, faults)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    faults.set("sbatch", "lost-reply")
    faults.set("squeue", "no-name")
    provider.poll_once()
    faults.set("squeue", "ok")
    assert len(on_cluster(natives, provider.tag)) == 1 and not tracked(provider)
    provider.close()
    assert not on_cluster(natives, provider.tag)


def _running(provider: BackfillProvider) -> int:
    return sum(b.phase is Phase.RUNNING for b in provider.blocks())
