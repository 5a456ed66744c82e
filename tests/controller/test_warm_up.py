"""An agent's warm-up: torch and the catalogued functions' modules imported, each ``prepare``
hook run once with the job's arguments, in a thread while the agent says hello."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from typing import Any

import pytest

from parsl_malleable.controller.functions import function_reference
from parsl_malleable.controller.node_agent import JobPayload, WarmUp
from parsl_malleable.elastic.settings import RankSettings, prepared_by

PREPARED: list[dict[str, Any]] = []
RELEASE = threading.Event()


def _prepare(**kwargs: Any) -> None:
    RELEASE.wait(30)
    PREPARED.append(kwargs)


@prepared_by(_prepare)
def train(ctx: object, epochs: int = 1) -> None:
    """A training function with a prepare hook (never run here)."""


def _fail(**kwargs: Any) -> None:
    raise OSError("the data folder is not mounted")


@prepared_by(_fail)
def broken(ctx: object) -> None:
    """A training function whose data cannot be staged."""


def payload(fn: Any, **kwargs: Any) -> JobPayload:
    return JobPayload(function_reference(fn), (), kwargs, RankSettings())


def test_the_hook_runs_in_the_background_with_the_job_arguments() -> None:
    PREPARED.clear()
    RELEASE.clear()
    warm = WarmUp(
        {"a": payload(train, epochs=3, lr=0.1)},
    )
    assert PREPARED == []  # still waiting: the agent's hello is not held up
    RELEASE.set()
    warm.wait()
    assert PREPARED == [{"epochs": 3, "lr": 0.1}]
    assert warm.seconds > 0


def test_a_failing_hook_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        WarmUp({"b": payload(broken)}).wait()
    assert "agent warm-up failed" in caplog.text
    assert "not mounted" in caplog.text


def test_an_agent_imports_neither_torch_nor_the_allocator_before_its_hello() -> None:
    # What a worker imports to unpickle an agent task: the module of run_agent and the
    # classes of its arguments. Torch (and the controller's allocator) come after the hello.
    code = (
        "import sys, parsl_malleable.controller.node_agent as a, parsl_malleable.elastic.settings;"
        "print(sorted(m for m in ('torch', 'pulp', 'parsl_malleable.controller.live',"
        " 'parsl_malleable.controller.agent_pool', 'parsl_malleable.controller.job_book')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
