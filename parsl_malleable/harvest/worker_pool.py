"""Parsl's worker pool, started with one interpreter fewer importing Parsl and torch warming.

A block's node runs ``process_worker_pool.py``. That script is its own ``__main__``, and the pool
starts its processes with multiprocessing's *spawn*, which runs the parent's main script again
in every child: the pool's manager server and its worker each import all of Parsl before they
do anything (about 0.8 s each here, one after the other), and only then does the worker take
the agent task, whose first rank imports torch (about 1.5 s more).

``parsl-malleable-pool`` (this module's :func:`main`, a console script) runs the same pool with
the same arguments: it imports Parsl's pool module and runs that module's own ``__main__``
block in the module's namespace, so nothing of Parsl's start-up is copied here. Its children
then run only this small module again as their main script: the manager server imports nothing
of Parsl (0.75 s less to a pool's first task here), and each HTEX worker starts importing torch
(:mod:`parsl_malleable.elastic.warm`) in a thread at once, while it imports the pool module that
its target comes from. The two imports share the worker's GIL, so the worker is ready a little
later (0.2-0.3 s), but its agent's rank no longer waits for torch (0.7 s sooner). Measured on
the local cluster in docs/benchmarks.md ("Node idle to first training step"): a node's warm
start 5.89 s against 6.75 s with Parsl's own pool script.
"""

from __future__ import annotations

import ast
import inspect
import logging
import multiprocessing
import threading

POOL_MODULE = "parsl.executors.high_throughput.process_worker_pool"
# Parsl names the pool's worker processes so (process_worker_pool.Manager._start_worker).
WORKER_NAME_PREFIX = "HTEX-Worker-"

logger = logging.getLogger(__name__)


def _warm_torch() -> None:
    try:
        import parsl_malleable.elastic.warm  # noqa: F401  (importing it pays torch's start-up)
    except Exception:  # a worker without torch still serves every other task
        logger.debug("warming torch in a worker failed", exc_info=True)


def _warm_if_spawned_worker() -> None:
    """In a pool's spawned HTEX worker, import torch in the background from the start. (A
    spawned child has its name while it imports its main script, before multiprocessing knows
    its parent: the name is what tells a worker from the manager's server or the pool.)"""
    if not multiprocessing.current_process().name.startswith(WORKER_NAME_PREFIX):
        return  # the pool itself, or the manager's server: neither needs torch
    threading.Thread(target=_warm_torch, name="warm-torch", daemon=True).start()


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
    import importlib

    pool = importlib.import_module(POOL_MODULE)
    block = _main_block(inspect.getsource(pool))
    # Parsl's own start-up, in its own namespace: the pool's classes and its worker function
    # keep their module's name, which is what the spawned children import them by.
    exec(compile(block, inspect.getfile(pool), "exec"), vars(pool))  # noqa: S102


_warm_if_spawned_worker()

__all__ = ["main"]
