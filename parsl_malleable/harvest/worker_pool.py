"""Parsl's worker pool, its processes forked from a server that has Parsl and torch imported.

A block's node runs ``process_worker_pool.py``. That script is its own ``__main__``, and the pool
starts its processes with multiprocessing's *spawn*, which runs the parent's main script again
in every child: the pool's manager server and its worker each import all of Parsl before they
do anything (about 0.8 s each here, one after the other), and only then does the worker take
the agent task, whose first rank imports torch and its first optimizer's lazy imports (about
2.3 s more).

``parsl-malleable-pool`` (this module's :func:`main`, a console script) runs the same pool with
the same arguments: it imports Parsl's pool module and runs that module's own ``__main__``
block in the module's namespace, so nothing of Parsl's start-up is copied here. Before that,
at its first line, it forks multiprocessing's *fork server* from itself and gives the pool that
start method in place of spawn. The server imports :mod:`~parsl_malleable.harvest.pool_preload`
(torch, its first optimizer's lazy imports, then Parsl's pool module) while the pool imports
Parsl, each on a core of the node's own; the pool's manager server and workers are forks of it,
so a worker is ready with both imports paid and a rank no longer waits for torch. A pool's
first task with torch ready: 3.35 s after the block's start against 5.79 s with Parsl's script
(``benchmarks/bench_pool_start.py``, idle machine), and no interpreter is started for the
server.

Parsl's pool is written for spawn, and what spawn guarantees holds: no child inherits the
pool's threads, sockets or locks, because the server is forked before the pool makes any and
forks children only from its own single thread; and no child inherits a torch thread pool,
because the server never runs a parallel operation. Its socket is multiprocessing's, in a
private temporary folder (mode 0600). Parsl's import is made without Globus Compute's SDK
and SQLAlchemy, which the pool never uses (the SDK starts a thread at import). Where the
server cannot be forked here (threads already running, a multiprocessing whose fork server
this module does not know), multiprocessing starts it as a fresh interpreter with the same
preload; where the platform has no fork server, the pool spawns as Parsl's does.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import socket
import sys
import threading
import traceback
from types import ModuleType
from typing import Any

from parsl_malleable.watchdog import isolate_child_imports

POOL_MODULE = "parsl.executors.high_throughput.process_worker_pool"
PRELOAD_MODULE = "parsl_malleable.harvest.pool_preload"
# The name in Parsl's pool module of the context it starts every process with.
POOL_CONTEXT_NAME = "SpawnContext"
# Optional packages Parsl imports whole but a pool never uses: Globus Compute's SDK (0.22 s,
# and it starts a thread at import, which a fork must not find) and SQLAlchemy (Parsl's
# monitoring database; 0.17 s). Each process that imports Parsl saves them.
POOL_SKIPS = ("globus_compute_sdk", "sqlalchemy")
# multiprocessing's fork server entry point and state, as this module uses them (CPython 3.11).
_SERVER_MAIN_PARAMETERS = ["listener_fd", "alive_r", "preload", "main_path", "sys_path"]
_SERVER_STATE = ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_lock")


def import_pool_module() -> ModuleType:
    """Parsl's pool module, imported without the optional packages :data:`POOL_SKIPS` (Parsl
    then says they are missing where it would use them: its Globus Compute executor and its
    monitoring database, both on the driver's side, never in a pool). Later imports of them,
    by a task in a worker, work as usual. A Parsl that needs one of them gets it: the import
    is made again with it."""
    if POOL_MODULE in sys.modules:
        return sys.modules[POOL_MODULE]
    skipped = [name for name in POOL_SKIPS if name not in sys.modules]
    for name in skipped:
        sys.modules[name] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        return importlib.import_module(POOL_MODULE)
    except ImportError as exc:
        if exc.name not in skipped:
            raise
    finally:
        for name in skipped:
            del sys.modules[name]
    return importlib.import_module(POOL_MODULE)


def _server_forkable_here() -> bool:
    server: Any = multiprocessing.forkserver._forkserver
    try:
        parameters = list(inspect.signature(multiprocessing.forkserver.main).parameters)
    except (TypeError, ValueError):
        return False
    return (
        parameters == _SERVER_MAIN_PARAMETERS
        and all(hasattr(server, name) for name in _SERVER_STATE)
        and server._forkserver_pid is None
        and threading.current_thread() is threading.main_thread()
        and threading.active_count() == 1
    )


def _fork_server() -> None:
    """Start multiprocessing's fork server as a fork of this process, as
    ``ForkServer.ensure_running`` would start it as a new interpreter (same socket, same pipe,
    same preload), and record it where multiprocessing looks for it."""
    server: Any = multiprocessing.forkserver._forkserver
    multiprocessing.resource_tracker.ensure_running()
    # Not under server._lock: every fork of the server would inherit it held, and a process
    # started from a worker (a DataLoader's) would wait for it forever. No other thread runs
    # here (_server_forkable_here).
    with socket.socket(socket.AF_UNIX) as listener:
        address = multiprocessing.connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        # Every client holds the write end of "alive": when all have ended, the server does.
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the server: it never returns into the pool's code
            code = 0
            try:
                os.close(alive_w)
                multiprocessing.forkserver.main(listener.fileno(), alive_r, [PRELOAD_MODULE])
            except SystemExit:
                pass  # every client has ended
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid


def start_preloaded_context() -> multiprocessing.context.BaseContext:
    """A multiprocessing context whose children are forks of a server that has imported
    :data:`PRELOAD_MODULE` (and whatever this process had imported, where the server could be
    forked from it). The server starts now and imports in the background; spawn where the
    platform has no fork server."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # Also what a server multiprocessing starts again (if this one dies) preloads.
    context.set_forkserver_preload([PRELOAD_MODULE])
    if _server_forkable_here():
        _fork_server()
    else:
        multiprocessing.forkserver.ensure_running()
    return context


def _main_block(source: str) -> ast.Module:
    """The body of the module's ``if __name__ == "__main__":`` block, as a module."""
    tree = ast.parse(source)
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
            and len(node.test.comparators) == 1
            and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value == "__main__"
        ):
            return ast.Module(body=node.body, type_ignores=[])
    raise RuntimeError(f"{POOL_MODULE} has no __main__ block: this Parsl is not supported")


def main() -> None:
    """Run Parsl's worker pool with the command line's arguments (see the module docstring)."""
    # Before any process starts: multiprocessing starts its resource tracker (and a fork
    # server it cannot fork) as ``python -c``, which would put the block's working folder
    # first on their path; a block started without the driver's environment (PBS gives a
    # login one) has no PYTHONSAFEPATH otherwise (issue 49).
    isolate_child_imports()
    # First, while this process has imported nothing: the server's imports then run beside
    # the pool's own import of Parsl, where a node has a core for each.
    context = start_preloaded_context()
    pool = import_pool_module()
    if not hasattr(pool, POOL_CONTEXT_NAME):
        raise RuntimeError(f"{POOL_MODULE} has no {POOL_CONTEXT_NAME}: this Parsl is not supported")
    setattr(pool, POOL_CONTEXT_NAME, context)
    block = _main_block(inspect.getsource(pool))
    # Parsl's own start-up, in its own namespace: the pool's classes and its worker function
    # keep their module's name, which is what the children import them by.
    exec(compile(block, inspect.getfile(pool), "exec"), vars(pool))  # noqa: S102


__all__ = [
    "POOL_MODULE",
    "POOL_SKIPS",
    "PRELOAD_MODULE",
    "import_pool_module",
    "main",
    "start_preloaded_context",
]
