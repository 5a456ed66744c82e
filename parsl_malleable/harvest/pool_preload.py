"""What a block's fork server imports once, before it forks the worker pool's processes.

:mod:`parsl_malleable.harvest.worker_pool` starts multiprocessing's fork server with this
module as its only preload. Every process the pool starts afterwards (its manager server and
its HTEX workers) is a fork of that server, so it begins with torch and Parsl's pool module
(where the workers' target lives) already imported, instead of importing both itself.
"""

from __future__ import annotations

import importlib
import logging

from parsl_malleable.harvest.worker_pool import import_pool_module

logger = logging.getLogger(__name__)

try:
    # torch and its first optimizer's lazy imports: what a rank needs before its first step
    importlib.import_module("parsl_malleable.elastic.warm")
except Exception:  # a pool without torch still serves every other kind of task
    logger.debug("preloading torch for the worker pool failed", exc_info=True)
import_pool_module()
