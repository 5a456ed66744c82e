"""The site's conditions, on the real local Slurm cluster: a killed driver leaves no block behind,
admin intent wins (a drained node, a maintenance reservation), and in preemption mode a native
job takes a block's nodes without waiting for any poll of ours."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from parsl.jobs.states import JobState as P

from parsl_malleable.controller.blocks import ProviderBlocks, block_key
from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider

from .conftest import REPO, Natives, job_states, run_slurm, wait_for

pytestmark = pytest.mark.slurm

Make = Callable[..., BackfillProvider]

# A Parsl driver that harvests two blocks with the real HTEX, keeps a task busy on each, prints
# its blocks' job ids and waits to be killed.
DRIVER = """
import json, time
import parsl
from parsl import python_app
from parsl.config import Config
from parsl_malleable.provider import BackfillProvider, harvest_executor

provider = BackfillProvider("slurm-test", max_blocks=2)
parsl.load(Config(executors=[harvest_executor(provider)], strategy="none"))

@python_app
def hold():
    import time
    time.sleep(3600)

futures = [hold() for _ in range(2)]
while sum(b.phase.value == "running" for b in provider.blocks()) < 2:
    time.sleep(0.5)
print(json.dumps([b.job_id for b in provider.blocks()]), flush=True)
time.sleep(3600)
"""


def _lives(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (a zombie not yet reaped does not)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _our_jobs(natives: Natives) -> list[str]:
    out = run_slurm(natives.cluster, "squeue", "-h", "-o", "%i %j", "-t", "PD,R,CG")
    return [row.split()[0] for row in out.splitlines() if "pm-block" in row]


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return lines[0] if lines else ""


def test_blocks_end_by_themselves_within_60_s_of_a_kill_9_of_the_driver(
    natives: Natives, tmp_path: Path
) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, **natives.cluster.env, "PYTHONPATH": str(REPO)}
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    driver = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
    )
    helpers: list[psutil.Process] = []
    try:
        line = _first_line(driver, 180)
        assert line, "the driver never had two blocks running"
        job_ids = json.loads(line)
        helpers = psutil.Process(driver.pid).children(recursive=True)
        interchanges = [h for h in helpers if "interchange" in " ".join(h.cmdline())]
        os.kill(driver.pid, signal.SIGKILL)
        killed = time.monotonic()
        driver.wait()
        assert wait_for(lambda: not set(job_ids) & set(_our_jobs(natives)), 70)
        gone_after = time.monotonic() - killed
        print(f"blocks gone {gone_after:.1f} s after the driver's kill -9")
        assert gone_after < 60, f"blocks lasted {gone_after:.0f} s after the driver died"
        # The interchange ended with its driver (it watches its reparenting, issue 49), and no
        # watchdog runs here: nothing cancelled the blocks, they ended by themselves.
        assert interchanges and not any(_lives(h) for h in interchanges)
        # Parsl points the provider's script_dir into its run directory.
        said = "".join(p.read_text() for p in tmp_path.rglob("pm-block-*.out"))
        assert "heartbeat" in said and "the block ends" in said
    finally:
        for proc in helpers:
            if proc.is_running():
                proc.kill()
        if driver.poll() is None:
            driver.kill()
        ours = _our_jobs(natives)
        if ours:
            run_slurm(natives.cluster, "scancel", *ours)


def _running_block(provider: BackfillProvider, count: int = 1) -> None:
    for _ in range(20):
        provider.poll_once()
        if sum(b.phase is Phase.RUNNING for b in provider.blocks()) >= count:
            return
        time.sleep(1.0)  # between polls, as the provider's own thread would pace them
    raise AssertionError(f"no {count} running block(s); last poll {provider.last_report}")


def test_a_block_on_a_drained_node_yields_within_one_poll(
    natives: Natives, providers: Make
) -> None:
    provider = providers(autostart=False)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    _running_block(provider)
    block = next(b for b in provider.blocks() if b.phase is Phase.RUNNING)
    node = block.nodes[0]
    run_slurm(natives.cluster, "scontrol", "update", f"NodeName={node}", "State=DRAIN",
              "Reason=pm-test")  # fmt: skip
    try:
        report = provider.poll_once()
        assert block.job_id in report.yielded, report
        record = next(r for r in provider.history() if r.job_id == block.job_id)
        assert "out of service" in record.yield_reason and node in record.yield_reason
        assert record.cancel_reason is CancelReason.OUT_OF_SERVICE  # not a native job's yield
    finally:
        run_slurm(natives.cluster, "scontrol", "update", f"NodeName={node}", "State=RESUME")


def _reserve(natives: Natives, name: str, in_s: int) -> float:
    run_slurm(natives.cluster, "scontrol", "create", "reservation", f"ReservationName={name}",
              f"StartTime=now+{in_s}", "Duration=10", "Nodes=ALL", "Flags=MAINT",
              "Users=root")  # fmt: skip
    out = run_slurm(natives.cluster, "scontrol", "show", "reservation", name, "-o")
    field = next(f for f in out.split() if f.startswith("StartTime="))
    return float(field.split("=", 1)[1])


def test_a_near_maintenance_reservation_gets_no_block_and_the_log_says_why(
    natives: Natives, providers: Make, caplog: pytest.LogCaptureFixture
) -> None:
    _reserve(natives, "pm-maint-near", 150)
    try:
        provider = providers(autostart=False)
        provider.submit("sleep 600", 1, "parsl.htex.block-0")
        with caplog.at_level(logging.INFO, logger="parsl_malleable.provider"):
            for _ in range(3):
                provider.poll_once()
        assert provider.history() == []  # no block of 60 s + 120 s margin fits in 150 s
        said = [r.getMessage() for r in caplog.records if "pm-maint-near" in r.getMessage()]
        assert len(said) == 1, said  # once, not once a poll
        assert "no block" in said[0]
    finally:
        run_slurm(natives.cluster, "scontrol", "delete", "ReservationName=pm-maint-near")


def test_blocks_end_before_a_later_maintenance_reservation(
    natives: Natives, providers: Make
) -> None:
    start = _reserve(natives, "pm-maint-far", 420)
    try:
        provider = providers(autostart=False)
        for i in range(2):
            provider.submit("sleep 600", 1, f"parsl.htex.block-{i}")
        _running_block(provider, 2)
        for block in provider.blocks():
            assert block.deadline is not None and block.deadline <= start
    finally:
        run_slurm(natives.cluster, "scontrol", "delete", "ReservationName=pm-maint-far")


def test_preemption_mode_a_native_job_gets_block_nodes_without_a_poll(
    natives: Natives, providers: Make
) -> None:
    provider = providers(profile="slurm-preempt", autostart=False)
    for i in range(6):
        provider.submit("sleep 600", 1, f"parsl.htex.block-{i}")
    _running_block(provider, 6)
    assert sum(len(b.nodes) for b in provider.blocks()) == 6  # the whole machine, a block a node
    victims = {b.job_id for b in provider.blocks()}
    polls = provider.polls
    native = natives.submit("-N2", "-t", "2", "--wrap", "sleep 30")
    # Nobody polls: Slurm itself takes the nodes back.
    assert wait_for(lambda: job_states(natives.cluster, [native])[native][0] == "RUNNING", 60)
    assert provider.polls == polls
    provider.poll_once()
    preempted = [r for r in provider.history() if r.job_id in victims and r.end_state is not None]
    # Seen as preempted by the site (Slurm's PreemptTime), not as failed blocks.
    assert preempted and all("preempted" in r.message for r in preempted), preempted
    assert all(r.end_state is P.TIMEOUT for r in preempted)
    # Slurm chose which blocks go; the provider cancelled none of its own for the native job.
    assert not any(r.cancel_reason is CancelReason.YIELD for r in provider.history())


def test_a_block_preempted_before_any_poll_saw_it_run_is_not_a_failure(
    natives: Natives, providers: Make
) -> None:
    provider = providers(profile="slurm-preempt", autostart=False, max_consecutive_failures=1)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    provider.poll_once()  # submits the block, after this poll's own look at the queue
    [block] = provider.blocks()
    assert block.phase is Phase.PENDING
    # It starts, and a native job preempts it, with no poll of ours in between: its worker
    # ends on Slurm's SIGTERM, so the job ends FAILED, not PREEMPTED.
    assert wait_for(
        lambda: job_states(natives.cluster, [block.job_id])[block.job_id][0] == "RUNNING", 60
    )
    native = natives.submit("-N6", "-t", "2", "--wrap", "sleep 30")
    assert wait_for(lambda: job_states(natives.cluster, [native])[native][0] == "RUNNING", 60)
    provider.poll_once()
    [record] = [r for r in provider.history() if r.job_id == block.job_id]
    assert record.end_state is P.TIMEOUT and "preempted" in record.message, record.message
    assert not provider.gave_up  # one failure would have been enough to give up
    # Never seen running, yet its start-up phases are known: Slurm's start, kept apart.
    assert record.start is None and record.start_reported is not None
    assert record.submitted_at - 1 <= record.start_reported <= time.time()
    key = block_key(record.block_id, record.job_id)
    [view] = ProviderBlocks(provider).ended_blocks({key, "0/no-such-job"}).values()
    assert (view.submitted_at, view.started_at) == (record.submitted_at, record.start_reported)


def test_a_refused_start_test_is_logged_once_with_slurms_words(
    natives: Natives,
    providers: Make,
    fake_bin: Callable[[str, str], dict[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    real = run_slurm(natives.cluster, "sh", "-c", "command -v sbatch").strip()
    words = "Requested node configuration is not available"
    env = fake_bin(
        "sbatch",
        f'case "$*" in *--test-only*) echo "sbatch: error: Batch job submission failed: '
        f'{words}" >&2; exit 1;; esac\nexec {real} "$@"',
    )
    provider = providers(autostart=False, env={**natives.cluster.env, **env})
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    with caplog.at_level(logging.INFO, logger="parsl_malleable.provider"):
        reports = [provider.poll_once() for _ in range(3)]
    assert all(r.error == "" for r in reports), reports  # a refusal is not a failed poll
    assert all(any(words in why for why in r.skipped) for r in reports), reports
    said = [r.getMessage() for r in caplog.records if words in r.getMessage()]
    assert len(said) == 1, said
    assert provider.history() == []


def test_the_queue_watch_submits_a_block_when_a_native_frees_a_node_and_none_runs(
    natives: Natives, providers: Make
) -> None:
    # Every node busy with a native job: the first poll finds no window and runs no block.
    # Polls are far apart, so only the queue watch (1 s) can see the node freed in time.
    holders = [natives.submit("-N1", "-t", "5", "--wrap", "sleep 600") for _ in range(6)]
    assert wait_for(
        lambda: all(s == "RUNNING" for s, _ in job_states(natives.cluster, holders).values()), 60
    )
    poll_s = 600.0
    provider = providers(profile="slurm-preempt", poll_interval_s=poll_s, max_blocks=1)
    provider.submit("sleep 600", 1, "parsl.htex.block-0")
    assert wait_for(lambda: provider.polls >= 1, 60)
    assert provider.blocks() == [] and provider.launcher.waiting_for_window
    freed = time.monotonic()
    subprocess.run(
        ["scancel", holders[0]], env={**os.environ, **natives.cluster.env}, check=True, timeout=30
    )
    assert wait_for(lambda: provider.blocks() != [], 120), provider.last_report
    assert time.monotonic() - freed < poll_s / 4  # the watch's poll, not the interval's
    assert provider.polls >= 2
