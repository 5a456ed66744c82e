"""``parsl-malleable-pool``: Parsl's own worker pool, started with a lighter main script (its
spawned manager server imports nothing of Parsl) and torch warming in each worker."""

from __future__ import annotations

import importlib
import inspect
import shutil
from pathlib import Path

import parsl
import pytest
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider

from parsl_malleable.harvest import worker_pool
from parsl_malleable.provider import POOL_LAUNCH_CMD


def test_parsls_main_block_is_found_and_a_module_without_one_is_refused() -> None:
    pool = importlib.import_module(worker_pool.POOL_MODULE)
    block = worker_pool._main_block(inspect.getsource(pool))
    source = "\n".join(type(node).__name__ for node in block.body)
    assert "Try" in source  # Parsl's block builds the Manager inside a try
    assert POOL_LAUNCH_CMD.startswith("parsl-malleable-pool ")
    with pytest.raises(RuntimeError, match="no __main__ block"):
        worker_pool._main_block("x = 1\n")


_WHERE = """
def where():
    import multiprocessing
    import sys
    import time

    # The worker's warm-up imports torch in a thread from the worker's start: wait for it
    # rather than take its absence at once for an answer (a loaded machine is slower).
    deadline = time.monotonic() + 60
    while "parsl_malleable.elastic.warm" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.05)
    main = sys.modules["__main__"]
    return (
        multiprocessing.current_process().name,
        str(getattr(main, "__file__", "")),
        "parsl_malleable.elastic.warm" in sys.modules,
    )
"""


def test_a_pool_started_by_the_launcher_runs_tasks_in_a_worker_that_warmed_torch(
    tmp_path: Path,
) -> None:
    if shutil.which("parsl-malleable-pool") is None:
        pytest.fail("parsl-malleable-pool is not on PATH: install the package (pip install -e .)")

    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(_WHERE, namespace)  # shipped by value: workers cannot import this test module
    where = parsl.python_app(namespace["where"])  # type: ignore[arg-type]
    htex = HighThroughputExecutor(
        label="pool",
        max_workers_per_node=1,
        address="127.0.0.1",
        launch_cmd=POOL_LAUNCH_CMD,
        provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1),
    )
    with parsl.load(Config(executors=[htex], run_dir=str(tmp_path / "runinfo"))):
        name, main, warmed = where().result(timeout=180)
    assert name.startswith(worker_pool.WORKER_NAME_PREFIX)
    assert Path(main).name == "parsl-malleable-pool"  # the launcher is the worker's main script
    assert warmed


def test_the_warm_up_runs_only_in_a_pools_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []

    class Thread:
        def __init__(self, target: object, name: str, daemon: bool) -> None:
            started.append(name)

        def start(self) -> None:
            pass

    monkeypatch.setattr(worker_pool.threading, "Thread", Thread)
    process = worker_pool.multiprocessing.current_process()
    for name, warms in [("MainProcess", False), ("SyncManager-1", False), ("HTEX-Worker-3", True)]:
        monkeypatch.setattr(process, "name", name)
        started.clear()
        worker_pool._warm_if_spawned_worker()
        assert started == (["warm-torch"] if warms else []), name
