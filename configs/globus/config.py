"""Globus Compute endpoint configuration that harvests idle nodes with ``BackfillProvider``.

Endpoint YAML cannot name a provider outside ``parsl.providers`` (it resolves
``provider: {type: X}`` with ``getattr(parsl.providers, X)``), so a harvesting endpoint uses a
Python configuration: copy this file to ``~/.globus_compute/<endpoint>/config.py`` and start
the endpoint as usual (``globus-compute-endpoint start <endpoint>``). The site profile (here
``providers/example-slurm.yaml``, or a path, or a name found through ``$PM_PROVIDER_PROFILES``)
sets partition, QOS, margins, poll interval and the cap on harvested nodes.

One worker per node (``max_workers_per_node=1``): each node of a block runs one worker pool,
started by the block script with ``srun --ntasks-per-node=1``. The engine's default 'simple'
strategy leaves the block count alone: the provider owns it (see docs/provider.md).
"""

from globus_compute_endpoint.endpoint.config import UserEndpointConfig
from globus_compute_endpoint.engines import GlobusComputeEngine

from parsl_malleable.harvest import backfill_error_handler
from parsl_malleable.provider import BackfillProvider

config = UserEndpointConfig(
    engine=GlobusComputeEngine(
        provider=BackfillProvider("example-slurm"),
        max_workers_per_node=1,
        block_error_handler=backfill_error_handler,
    ),
)
