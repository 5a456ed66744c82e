"""A rank whose training function raises: its full traceback (the user's file and line) travels
with the failure, to the coordinator (and so the job's error) and in the agent's outcome,
bounded in size."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from parsl_malleable.controller.node_agent import JobPayload, _run_rank
from parsl_malleable.elastic.backend_registry import get_rendezvous_host
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.settings import (
    CHUNK_CHARS,
    TRACEBACK_CHARS,
    RankSettings,
    RankSpec,
    failure_traceback,
)
from tests.elastic import failing_training

USER_FILE = str(Path(failing_training.__file__).resolve())


def _raising_line() -> int:
    lines, first = inspect.getsourcelines(failing_training.check_loss)
    return first + next(i for i, line in enumerate(lines) if "raise ValueError" in line)


def _user_frame() -> str:
    return f'File "{USER_FILE}", line {_raising_line()}, in check_loss'


@pytest.fixture
def coordinator():
    c = Coordinator(get_rendezvous_host("torch"), settle_s=0.0)
    c.start()
    yield c
    c.close()


def test_a_failing_rank_brings_its_traceback_to_the_coordinator_and_its_outcome(coordinator):
    host, port = coordinator.address
    spec = RankSpec(host, port, coordinator.token, RankSettings(checkpoint_dir=None))
    payload = JobPayload(failing_training.train_then_fail, (), {"fail_at": 2}, spec.settings)

    outcome = _run_rank(spec, payload)

    assert outcome.status == "failed"
    assert outcome.reason == "ValueError: loss diverged at step 2"
    assert _user_frame() in outcome.traceback, outcome.traceback
    assert outcome.traceback.rstrip().endswith("ValueError: loss diverged at step 2")
    assert coordinator.outcome == "aborted"
    assert "loss diverged at step 2" in (coordinator.abort_message or "")
    assert _user_frame() in coordinator.abort_traceback, coordinator.abort_traceback


def test_the_first_abort_keeps_its_traceback(coordinator):
    coordinator.abort("rank a failed", traceback="Traceback (first)")
    coordinator.abort("rank b failed", traceback="Traceback (second)")
    assert coordinator.abort_message == "rank a failed"
    assert coordinator.abort_traceback == "Traceback (first)"


def _chain(levels: int) -> None:
    """Raise a chain of ``levels`` exceptions, each from the one before (a long traceback)."""
    try:
        if levels > 1:
            _chain(levels - 1)
        else:
            raise RuntimeError("innermost " + "x" * 50_000)
    except RuntimeError as exc:
        raise RuntimeError(f"level {levels} " + "z" * 1_000) from exc


def test_the_traceback_is_bounded_and_keeps_the_innermost_frame_and_the_error():
    try:
        try:
            _chain(40)
        except RuntimeError as inner:
            raise ValueError("outer " + "y" * 50_000) from inner
    except ValueError as exc:
        text = failure_traceback(exc)
    assert len(text) <= TRACEBACK_CHARS + 100
    assert text.startswith("[... ") and "characters cut" in text.splitlines()[0]
    assert f'File "{__file__}"' in text and "ValueError: outer yyy" in text
    last = text.splitlines()[-1]  # the message, clipped
    assert last.startswith("ValueError: outer") and "characters cut" in last
    assert len(last) < CHUNK_CHARS + 100


@pytest.mark.slow
def test_the_job_error_carries_the_users_traceback(tmp_path, monkeypatch):
    import importlib

    import parsl

    from parsl_malleable.app import ElasticJobError, malleable_app
    from tests.elastic import elastic_scenario as sc

    # By name on the workers: site-packages may hold another ``tests`` package, so the module
    # travels as a top-level one from its folder.
    here = str(Path(USER_FILE).parent)
    monkeypatch.syspath_prepend(here)
    user_module = importlib.import_module("failing_training")
    sc.environment_ready()
    config = sc.htex_config(tmp_path / "runinfo", init_blocks=1)
    provider = config.executors[0].provider
    provider.worker_init = provider.worker_init.replace("PYTHONPATH=", f"PYTHONPATH={here}:")
    parsl.load(config)
    try:
        app = malleable_app(checkpoint_dir=str(tmp_path / "ckpt"))(user_module.train_then_fail)
        future = app(fail_at=3)
        with pytest.raises(ElasticJobError, match="loss diverged at step 3") as error:
            future.result(timeout=120)
    finally:
        parsl.dfk().cleanup()
    assert _user_frame() in error.value.traceback, error.value.traceback
    assert error.value.traceback.rstrip().endswith("ValueError: loss diverged at step 3")


@pytest.mark.slow
def test_a_function_that_does_not_import_on_the_workers_fails_the_job(tmp_path):
    import parsl

    from parsl_malleable.app import ElasticJobError, malleable_app
    from tests.elastic import elastic_scenario as sc

    sc.environment_ready()
    parsl.load(sc.htex_config(tmp_path / "runinfo", init_blocks=1))
    try:

        def train(ctx: object) -> None:
            return None

        # sent by name, as a module missing on the workers would be
        train.__module__, train.__qualname__ = "no_such_module_here", "train"
        future = malleable_app(checkpoint_dir=str(tmp_path / "ckpt"))(train)()
        with pytest.raises(ElasticJobError, match="No module named 'no_such_module_here'") as error:
            future.result(timeout=120)
    finally:
        parsl.dfk().cleanup()
    assert "ModuleNotFoundError" in error.value.traceback
