"""A remote user's campaign through a Globus Compute endpoint's own engine, trained through a yield.

The endpoint side is real: ``globus-compute-endpoint configure`` installs configs/globus,
``render-user-config`` renders the user template in ``mode: driver`` (the default), the
endpoint's ``load_config_yaml`` builds the ``GlobusComputeEngine`` (a ``LocalProvider`` on this
host) and the engine is started as a user endpoint starts it. The task is packed as the SDK packs
it (Globus Compute's serializer: ``train_campaign`` by reference, the campaign as YAML text) and
handed to ``engine.submit`` as the service would hand it over: the Globus Compute cloud service
is the only part missing, replaced by this test, which passes the packed task in and reads the
result out (nothing is mocked; tests/provider/test_globus.py follows the SDK's own submission to
what it sends).

The driver task runs ``parsl-malleable run``'s machinery on the endpoint host: a Parsl DFK with
a ``BackfillProvider`` on the local Slurm cluster (the endpoint's profile, ``slurm-test``, reaches
it from the template) and the controller. Its job trains on a harvested block; a native job
then asks for every node of the cluster, that block's too, so the block yields; the job goes
on on a later block and trains to its last step, in the same driver run.
"""

from __future__ import annotations

import math
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from globus_compute_common import messagepack
from globus_compute_common.messagepack.message_types import Task
from globus_compute_endpoint.endpoint.config.utils import load_config_yaml
from globus_compute_endpoint.engines.base import GCFuture
from globus_compute_sdk.serialize import ComputeSerializer

from parsl_malleable.campaign.globus_driver import train_campaign
from tests.campaign import runs
from tests.provider.conftest import Natives, job_states, natives, run_slurm, wait_for  # noqa: F401
from tests.provider.globus_endpoint import endpoint, render  # noqa: F401
from tests.schedulers.conftest import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

EPOCHS = 3
BATCH = 32
STEP_DELAY_S = 0.12  # about 5 s an epoch: the job outlasts its first block's yield


def _campaign() -> str:
    """What the user sends: YAML text, no ``site`` (the endpoint's profile is used)."""
    return yaml.safe_dump(
        {
            # Faster polls than slurm-test's, so that the yield and the next block come soon.
            "site_overrides": {"poll_interval_s": 2, "yield_grace_s": 1},
            "policy": {"solver": "greedy"},
            "jobs": [
                {
                    "name": "digits",
                    "app": "parsl_malleable.apps.digits:train_elastic",
                    "epochs": EPOCHS,
                    "max_nodes": 1,
                    "checkpoint_every": 10,
                    "args": {"batch_size": BATCH, "step_delay_s": STEP_DELAY_S},
                }
            ],
        }
    )


def _packed_task(task_id: uuid.UUID, output: Path) -> bytes:
    """The task as the SDK packs it and the service hands it to the endpoint."""
    serde = ComputeSerializer()
    buffer = serde.pack_buffers(
        [
            serde.serialize(train_campaign),
            serde.serialize((_campaign(),)),
            serde.serialize({"output": str(output)}),
        ]
    )
    return messagepack.pack(Task(task_id=task_id, task_buffer=buffer))


def _training_node(output: Path) -> str | None:
    """The node the job trains on, once it has trained for a few samples (1 s each)."""
    rows = runs.query(output, "SELECT node_names FROM job_samples WHERE world > 0 ORDER BY t")
    return rows[-1][0].split(",")[0] if len(rows) >= 3 and rows[-1][0] else None


def _steps_per_epoch() -> int:
    from parsl_malleable.apps.digits import load_data

    x_train = load_data()[0]
    return math.ceil(len(x_train) / BATCH)


def test_a_remote_users_campaign_trains_through_a_yield_of_its_block(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    natives: Natives,  # noqa: F811
    slurm_cluster: SlurmCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env, _ = endpoint
    rendered = render(env, tmp_path, {"profile": "slurm-test"})
    engine = load_config_yaml(rendered).engine
    assert type(engine.executor.provider).__name__ == "LocalProvider"
    # The driver's worker inherits the endpoint's environment: the cluster's, and HTEX's
    # scripts on PATH (sbatch passes both on to the blocks).
    for key, value in {**runs.env(), **slurm_cluster.env}.items():
        monkeypatch.setenv(key, value)
    output = tmp_path / "campaign"
    began = time.monotonic()
    engine.start(endpoint_id=uuid.uuid4(), run_dir=str(tmp_path / "endpoint"))
    try:
        task_id = uuid.uuid4()
        future = GCFuture(task_id)
        engine.submit(future, _packed_task(task_id, output), {})
        assert wait_for(lambda: _training_node(output) is not None, 90), runs.query(
            output, "SELECT * FROM job_samples"
        )
        node = _training_node(output)
        assert node is not None
        # The planner places a pending job on any idle node (it reads no --nodelist), so the
        # native job that must take the block's node asks for every node of the cluster.
        width = f"-N{len(slurm_cluster.nodes)}"
        native = natives.submit(width, "-t", "1", "--wrap", "sleep 2")
        packed = future.result(timeout=180)
    finally:
        engine.shutdown()
    elapsed = time.monotonic() - began
    result = messagepack.unpack(packed)
    assert result.error_details is None, result.data
    answer = ComputeSerializer().deserialize(result.data)

    assert answer["outcome"] == "finished", answer
    assert answer["done"] == ["digits"] and answer["failed"] == []
    (row,) = answer["results"]
    assert row["status"] == "done", row
    assert row["driver_runs"] == 1  # one driver, through the yield
    steps = EPOCHS * _steps_per_epoch()
    assert row["result.steps"] == steps, row
    assert row["result.test_accuracy"] >= 0.8, row

    blocks = answer["blocks"]
    yielded = [b for b in blocks if b["cancel_reason"] == "yield"]
    assert yielded, blocks
    assert node in yielded[0]["nodes"], (node, yielded)
    assert yielded[0]["end_state"] == "TIMEOUT"  # a yield is a preemption, never a failure
    # Training went on after the yield, on a block that started later.
    assert any(b["start"] and b["start"] > yielded[0]["start"] for b in blocks), blocks
    # The group formed after the yield went on from the step the first group had reached
    # (its drain checkpoint), not from the start (start_step is an epoch's first step
    # trained: 1 from scratch), and trained to the last step.
    first, *later = answer["epochs"]["digits"]
    assert first["last_step"] and later, answer["epochs"]
    assert 1 < later[0]["start_step"] <= first["last_step"] + 1, answer["epochs"]
    assert later[-1]["last_step"] == steps, answer["epochs"]
    # The native job got its node (squeue forgets it soon after it ends).
    try:
        state = job_states(natives.cluster, [native]).get(native, ("GONE", ""))[0]
    except subprocess.CalledProcessError:  # squeue errs on an id it has already forgotten
        state = "GONE"
    assert state in ("RUNNING", "COMPLETING", "COMPLETED", "GONE"), state

    ids = [b["job_id"] for b in blocks]
    out = run_slurm(natives.cluster, "squeue", "-h", "-o", "%i", "-t", "PD,R")
    assert not set(out.split()) & set(ids), "blocks outlived the campaign"
    print(f"campaign through a yield in {elapsed:.0f} s ({len(blocks)} blocks)")
