"""``parsl-malleable-pool``: Parsl's own worker pool, its workers forked from a server that
imported Parsl's pool module and torch before the first fork."""

from __future__ import annotations

import importlib
import inspect
import json
import shutil
import subprocess
import sys
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
    import os
    import sys
    from pathlib import Path

    def cmdline_and_parent(pid):
        proc = Path(f"/proc/{pid}")
        parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        return (proc / "cmdline").read_bytes().replace(b"\\0", b" ").decode(), parent

    parent, grandparent = cmdline_and_parent(os.getppid())
    return (
        multiprocessing.current_process().name,
        parent,
        cmdline_and_parent(grandparent)[0],
        # asked at once: a fork of the preloaded server has it before it runs anything
        "parsl_malleable.elastic.warm" in sys.modules,
    )
"""


def test_a_pool_started_by_the_launcher_runs_tasks_in_a_fork_that_preloaded_torch(
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
        name, parent, grandparent, preloaded = where().result(timeout=180)
    assert name.startswith("HTEX-Worker-")  # Parsl's worker, not some other process
    # worker <- fork server <- pool: the server is a fork of the launcher, so both are it
    # (spawned by the pool, the worker's parent would be the pool, and its grandparent the
    # block's shell)
    assert "parsl-malleable-pool" in parent and "parsl-malleable-pool" in grandparent
    assert preloaded


_CONTEXT_SCRIPT = """
import json
import multiprocessing
import os
import sys
import threading

from parsl_malleable.harvest import worker_pool


def nothing():
    pass


def report(queue):
    # A process started from the child with its default context, as a DataLoader in a worker
    # starts its own: it must start and end (a lock inherited held would hang it).
    nested = multiprocessing.get_context().Process(target=nothing)
    nested.start()
    nested.join(timeout=120)
    queue.put({"parent": os.getppid(), "torch": "torch" in sys.modules, "nested": nested.exitcode})


if __name__ == "__main__":
    if sys.argv[1] == "busy":  # a thread already running: the server cannot be forked here
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    context = worker_pool.start_preloaded_context()
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    seen = queue.get(timeout=240)
    child.join(timeout=60)
    server = worker_pool.multiprocessing.forkserver._forkserver._forkserver_pid
    cmdline = open(f"/proc/{seen['parent']}/cmdline", "rb").read().replace(b"\\0", b" ")
    print(json.dumps({
        "method": context.get_start_method(),
        "child_of_server": seen["parent"] == server,
        "server_cmdline": cmdline.decode(),
        "torch": seen["torch"],
        "exitcode": child.exitcode,
        "nested": seen["nested"],
    }))
"""


@pytest.mark.parametrize("where", ["quiet", "busy"])
def test_a_childs_parent_is_the_preloaded_server_forked_here_or_started_fresh(
    tmp_path: Path, where: str
) -> None:
    script = tmp_path / "context.py"
    script.write_text(_CONTEXT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), where], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["method"] == "forkserver" and seen["child_of_server"] and seen["exitcode"] == 0
    assert seen["torch"]  # the child began with the preload imported
    assert seen["nested"] == 0  # and can start processes of its own
    if where == "quiet":  # forked from the script: its command line, no interpreter of its own
        assert str(script) in seen["server_cmdline"]
    else:  # multiprocessing's own fresh server, with the same preload
        assert "multiprocessing.forkserver" in seen["server_cmdline"]
        assert worker_pool.PRELOAD_MODULE in seen["server_cmdline"]


def test_without_a_fork_server_the_pool_spawns_as_parsls_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        worker_pool.multiprocessing, "get_all_start_methods", lambda: ["spawn", "fork"]
    )
    assert worker_pool.start_preloaded_context().get_start_method() == "spawn"


def test_parsls_pool_module_is_imported_without_the_packages_a_pool_never_uses() -> None:
    code = (
        "import sys, threading; from parsl_malleable.harvest import worker_pool; "
        "worker_pool.import_pool_module(); "
        "print(*[n in sys.modules for n in worker_pool.POOL_SKIPS], threading.active_count()); "
        "import sqlalchemy"  # a task in a worker may still import one
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # none imported, and so no Globus Compute thread to fork beside
    assert done.stdout.split() == ["False", "False", "1"]


def test_a_package_parsl_needs_is_not_skipped() -> None:
    code = (
        "import sys; from parsl_malleable.harvest import worker_pool; "
        "worker_pool.POOL_SKIPS = ('zmq',); "  # Parsl's pool cannot start without it
        "pool = worker_pool.import_pool_module(); print(pool.__name__, 'zmq' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [worker_pool.POOL_MODULE, "True"]
