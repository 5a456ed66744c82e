"""BackfillProvider as the provider of a GlobusComputeEngine, run locally.

The Globus Compute cloud service cannot be reached from here, so the test plays the endpoint's
part: it packs the task as the service would (messagepack ``Task`` with a ComputeSerializer
buffer) and hands it to the engine, which runs it on a harvested Slurm node through HTEX.
Nothing is mocked: engine, executor, provider, Slurm and workers are the real ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from globus_compute_common import messagepack
from globus_compute_common.messagepack.message_types import Task
from globus_compute_endpoint.engines import GlobusComputeEngine
from globus_compute_endpoint.engines.base import GCFuture
from globus_compute_sdk.serialize import ComputeSerializer

from parsl_malleable.harvest import backfill_error_handler
from parsl_malleable.provider import BackfillProvider

_DOUBLE = """
def double(x):
    import os
    return (2 * x, os.environ.get("SLURMD_NODENAME"), os.environ.get("PARSL_WORKER_BLOCK_ID"))
"""


@pytest.mark.slurm
@pytest.mark.slow
def test_engine_runs_a_function_on_a_harvested_node(
    providers: Callable[..., BackfillProvider], tmp_path: Path
) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}  # shipped by value
    exec(_DOUBLE, namespace)
    provider = providers(slots=1, poll_interval_s=2, yield_grace_s=1)
    engine = GlobusComputeEngine(
        provider=provider,
        max_workers_per_node=1,
        block_error_handler=backfill_error_handler,
        encrypted=False,
        address="127.0.0.1",
    )
    engine.start(endpoint_id=uuid.uuid4(), run_dir=str(tmp_path / "endpoint"))
    try:
        serde = ComputeSerializer()
        task_id = uuid.uuid4()
        buffer = serde.pack_buffers(
            [serde.serialize(namespace["double"]), serde.serialize((21,)), serde.serialize({})]
        )
        future = GCFuture(task_id)
        engine.submit(future, messagepack.pack(Task(task_id=task_id, task_buffer=buffer)), {})
        result = messagepack.unpack(future.result(timeout=120))
        value, node, block = serde.deserialize(result.data)
        assert value == 42
        assert node in {f"n{i}" for i in range(1, 7)}
        assert block == "0"
        assert provider.script_dir == str(tmp_path / "endpoint" / "submit_scripts")
        # The engine's 'simple' strategy leaves the provider's one slot alone.
        assert list(engine.executor.blocks_to_job_id) == ["0"]
    finally:
        engine.shutdown()


def test_example_endpoint_config_builds() -> None:
    import runpy

    from globus_compute_endpoint.endpoint.config import UserEndpointConfig

    repo = Path(__file__).resolve().parents[2]
    config = runpy.run_path(str(repo / "configs" / "globus" / "config.py"))["config"]
    assert isinstance(config, UserEndpointConfig)
    provider = config.engine.executor.provider
    assert isinstance(provider, BackfillProvider)
    assert provider.profile.name == "example-slurm"
    assert provider.min_blocks == provider.max_blocks == provider.init_blocks == 8
    assert config.engine.executor.block_error_handler is backfill_error_handler
