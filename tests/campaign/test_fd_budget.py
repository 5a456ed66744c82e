"""The driver's descriptor budget (issue 49): the soft limit raised to the hard one, an alarm
before the descriptors run out, a reserve given back for the state, the exhaustion told from
other errors."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

from parsl_malleable.campaign.fd_budget import DescriptorBudget, exhaustion_in

EXHAUST = textwrap.dedent(
    """
    import os, resource, threading
    from parsl_malleable.campaign.fd_budget import DescriptorBudget, open_descriptors
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, 1000))
    said = threading.Event()
    budget = DescriptorBudget(lambda reason: said.set(), reserve=8, check_s=0.05)
    budget.start()
    assert budget.limit == 1000, budget.limit  # the soft limit raised to the hard one
    held = []
    # A flood's connections, as a loop of opens: the alarm comes before the last descriptor.
    while not said.is_set() and len(held) < 2000:
        held.append(os.open(os.devnull, os.O_RDONLY))
        if len(held) % 50 == 0:
            said.wait(1)
    assert said.is_set(), "no alarm"
    left = budget.limit - open_descriptors()
    assert left >= budget.reserve, left  # the reserve went back, and some were never taken
    print("ok", budget.margin, len(held), budget.reason, flush=True)
    """
)


def test_the_budget_raises_the_limit_and_alarms_before_the_descriptors_run_out() -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXHAUST], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok 250 "), done.stdout  # a quarter of 1000
    assert "rerun the same command to resume" in done.stdout


def test_exhaustion_is_told_from_other_errors() -> None:
    emfile = OSError(errno.EMFILE, "Too many open files")
    assert exhaustion_in(emfile)
    try:
        try:
            raise emfile
        except OSError as exc:
            raise RuntimeError("journal write failed") from exc
    except RuntimeError as wrapped:
        assert exhaustion_in(wrapped)  # through the chain
    assert not exhaustion_in(OSError(errno.ENOSPC, "No space left on device"))
    assert not exhaustion_in(PermissionError(errno.EACCES, "Permission denied"))


def test_an_error_far_from_the_limit_is_not_put_on_the_descriptors() -> None:
    alarms: list[str] = []
    budget = DescriptorBudget(alarms.append, reserve=2)
    budget.start()
    try:
        assert not budget.explains(ValueError("a bug"))
        assert not budget.tripped and alarms == []
        assert budget.explains(OSError(errno.EMFILE, "Too many open files"))
        assert budget.tripped and len(alarms) == 1
        assert budget.explains(ValueError("anything, once tripped"))
        assert len(alarms) == 1  # said once
    finally:
        budget.close()
