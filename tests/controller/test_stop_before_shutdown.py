"""The controller leaves HTEX's command channel before the executor shuts down.

A CI run hung 600 s in ``zmq_context.term()`` inside HTEX's shutdown: the controller's thread
had a request in flight on the command channel when Parsl terminated the interchange and closed
the channel from its own thread. ``stop_before_shutdown`` makes the executor's shutdown stop the
controller first. The end-to-end tests (tests/controller/test_live.py, the host-fault tests)
run it with real executors; here the order is checked on a stand-in executor, since making a
real request hang at the right moment is the race itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from parsl_malleable.controller.live import stop_before_shutdown


class Executor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def shutdown(self, timeout: float = 10.0) -> str:
        self.calls.append(("shutdown", timeout))
        return "down"


def test_the_controller_stops_before_the_executor_shuts_down() -> None:
    executor = Executor()
    stop_before_shutdown(executor, lambda: executor.calls.append(("stop", None)))  # type: ignore[arg-type]
    assert executor.shutdown(timeout=3.0) == "down"
    assert executor.calls == [("stop", None), ("shutdown", 3.0)]


def test_a_failing_stop_does_not_keep_the_executor_up(caplog: pytest.LogCaptureFixture) -> None:
    executor = Executor()

    def broken() -> None:
        raise RuntimeError("controller trouble")

    stop_before_shutdown(executor, broken)  # type: ignore[arg-type]
    assert executor.shutdown() == "down"
    assert executor.calls == [("shutdown", 10.0)]
    assert "controller trouble" in caplog.text
