"""Globus Compute: a harvesting endpoint, from the admin's files to a remote user's submission.

What runs here is the endpoint's own code: ``globus-compute-endpoint configure`` installs
``configs/globus/`` into a temporary ``GLOBUS_COMPUTE_USER_DIR`` (with a temporary ``HOME``, so
nothing leaks into the real one), ``render-user-config`` renders the user template,
``_start-user-endpoint`` (the command a manager endpoint execs for each user) loads it, and
``start`` runs the manager endpoint.

The Globus Compute cloud service cannot be reached from here. So the manager endpoint is run
until its registration with the service, which asks for a Globus login and stops there; the user
endpoint process is run until it asks for the credentials that the manager would have received
from the service ("No credential info provided"): both failures come after config validation,
and the tests assert that they are these failures and no other. The remote user's side
(``globus_compute_sdk.Executor``) is tested up to what it sends: the web-service client of a
real ``Client`` is a mock, the only mock in this file; everything packed before it is real.

The live test at the end runs a function through a GlobusComputeEngine on a harvested node of the
local Slurm cluster, handing it the task as the service would; nothing is mocked there.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
import yaml
from globus_compute_common import messagepack
from globus_compute_common.messagepack.message_types import Task
from globus_compute_endpoint.engines import GlobusComputeEngine
from globus_compute_endpoint.engines.base import GCFuture
from globus_compute_sdk.serialize import ComputeSerializer

from parsl_malleable.campaign.globus_driver import train_campaign
from parsl_malleable.harvest import backfill_error_handler
from parsl_malleable.provider import BackfillProvider
from tests.provider.globus_endpoint import (
    ENDPOINT,
    cli,
    endpoint,  # noqa: F401
    render,
    user_endpoint_env,
)

_LOAD = """
import json, sys
from globus_compute_endpoint.endpoint.config.utils import load_config_yaml
config = load_config_yaml(sys.stdin.read())
engine = config.engine
provider = engine.executor.provider
backfill = type(provider).__name__ == "BackfillProvider"
print(json.dumps({
    "config": type(config).__name__,
    "engine": type(engine).__name__,
    "provider": type(provider).__module__ + "." + type(provider).__qualname__,
    "profile": provider.profile.name if backfill else None,
    "max_harvested_nodes": provider.profile.max_harvested_nodes if backfill else None,
    "slots": [provider.init_blocks, provider.min_blocks, provider.max_blocks],
    "workers": engine.executor.max_workers_per_node,
    "heartbeat": [engine.executor.heartbeat_period, engine.executor.heartbeat_threshold],
    "worker_init": provider.profile.worker_init if backfill else provider.worker_init,
}))
"""


def _load(rendered: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The endpoint's ``load_config_yaml`` on ``rendered``, in a process with ``env``."""
    return subprocess.run(
        [sys.executable, "-c", _LOAD],
        env=env,
        input=rendered,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tasks_mode_loads_with_backfill_provider(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Rendered by the endpoint, loaded by its ``load_config_yaml`` in a user endpoint's env."""
    env, ep_dir = endpoint
    rendered = render(
        env, tmp_path, {"mode": "tasks", "profile": "slurm-test", "max_harvested_nodes": 3}
    )
    assert "type: BackfillProvider" in rendered
    done = _load(rendered, user_endpoint_env(env, ep_dir))
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == {
        "config": "UserEndpointConfig",
        "engine": "GlobusComputeEngine",
        "provider": "parsl_malleable.provider.BackfillProvider",
        "profile": "slurm-test",
        "max_harvested_nodes": 3,
        "slots": [3, 3, 3],  # the profile's max_blocks: the provider owns block counts
        "workers": 1,
        "heartbeat": [2, 10],
        "worker_init": "",  # the profile's own (none): the template sets none of its own
    }
    # Without the start-up hook (no PYTHONPATH from user_environment.yaml) the same YAML is
    # refused by the endpoint's dispatcher: the hook is what makes the name resolve.
    bare = _load(rendered, env)
    assert bare.returncode != 0
    assert "'BackfillProvider' is not a valid provider" in bare.stderr


def test_driver_mode_is_the_default_and_needs_no_hook(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """No ``mode``: the drivers' engine, a LocalProvider on the endpoint host whose workers get
    the endpoint's settings in their environment (what ``train_campaign`` reads)."""
    env, _ = endpoint
    options = {
        "profile": "slurm-test",
        "max_harvested_nodes": 3,
        "address": "10.0.0.7",
        "worker_init": 'export A="b c"; cd $HOME',
    }
    rendered = render(env, tmp_path, options)
    done = _load(rendered, env)  # the plain environment: LocalProvider is Parsl's
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["provider"] == "parsl.providers.local.local.LocalProvider"
    assert loaded["slots"] == [1, 1, 1]
    assert loaded["workers"] == 4
    assert loaded["worker_init"] == (
        "export PM_GLOBUS_MODE=driver PM_GLOBUS_SITE=slurm-test PM_GLOBUS_MAX_HARVESTED_NODES=3"
        ' PM_GLOBUS_ADDRESS=10.0.0.7\nexport A="b c"; cd $HOME'
    )
    # The shell reads those lines as the endpoint's settings and the user's own, unchanged.
    shell = subprocess.run(
        ["bash", "-c", loaded["worker_init"] + '\necho "$PM_GLOBUS_SITE|$PM_GLOBUS_ADDRESS|$A"'],
        env={**env, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert shell.stdout.strip() == "slurm-test|10.0.0.7|b c"
    default = yaml.safe_load(render(env, tmp_path, {}))["engine"]["provider"]
    assert default["worker_init"] == "export PM_GLOBUS_MODE=driver PM_GLOBUS_SITE=example-slurm"


def test_template_defaults_and_schema(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Mode tasks without options: the site's default profile. Options outside the schema
    are refused (an address with a space or quote could reach the drivers' shell)."""
    env, _ = endpoint
    rendered = yaml.safe_load(render(env, tmp_path, {"mode": "tasks"}))
    assert rendered["engine"]["provider"] == {
        "type": "BackfillProvider",
        "profile": "example-slurm",
    }
    opts = tmp_path / "bad.json"
    bad_options: list[dict[str, object]] = [
        {"queue": "debug"},
        {"profile": "../../etc/x"},
        {"max_harvested_nodes": 0},
        {"max_nodes": 4},  # the old name: the job-size setting has it
        {"mode": "both"},
        {"address": "host; rm -rf ~"},
    ]
    for bad in bad_options:
        opts.write_text(json.dumps(bad))
        done = cli(env, "render-user-config", "--endpoint", ENDPOINT, "--user-options", str(opts))
        assert done.returncode != 0, bad
        assert "Failed to render user configuration template" in done.stdout, done.stdout


def test_user_endpoint_process_gets_past_config_validation(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """``_start-user-endpoint`` (what the manager execs per user) loads the rendered config,
    in either mode.

    It then stops at the credentials the manager would pass it after registering with the
    cloud service (unreachable here): "No credential info provided".
    """
    env, ep_dir = endpoint
    uep_env = user_endpoint_env(env, ep_dir)
    for mode in ("tasks", "driver"):
        rendered = render(env, tmp_path, {"mode": mode, "profile": "slurm-test"})
        stdin = json.dumps({"ep_info": {}, "config": rendered})
        done = cli(uep_env, "_start-user-endpoint", ENDPOINT, stdin=stdin, timeout=120)
        assert done.returncode != 0
        assert "No credential info provided" in done.stdout, (mode, done.stdout)
        assert "make_credential_provider" in done.stdout
        assert "not a valid provider" not in done.stdout
        assert "Endpoint will not start" not in done.stdout
    # The control: mode tasks without user_environment.yaml fails at the config.
    rendered = render(env, tmp_path, {"mode": "tasks", "profile": "slurm-test"})
    stdin = json.dumps({"ep_info": {}, "config": rendered})
    bare = cli(env, "_start-user-endpoint", ENDPOINT, stdin=stdin, timeout=120)
    assert "'BackfillProvider' is not a valid provider" in bare.stdout, bare.stdout
    assert "No credential info provided" not in bare.stdout


def test_manager_endpoint_start_gets_to_registration(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """``start`` validates config.yaml, then registers with the cloud service: a Globus login
    is asked for, which no one answers here (stdin is empty), so it aborts there."""
    env, _ = endpoint
    done = cli(env, "start", ENDPOINT, timeout=120)
    assert done.returncode != 0
    assert "Please authenticate with Globus" in done.stdout, done.stdout
    assert "Aborted!" in done.stdout
    assert "will not start" not in done.stdout
    # What config.py (and any config.yaml holding an engine) gets from a current endpoint,
    # the reason configs/globus has no config.py any more.
    legacy = tmp_path / "gc" / "legacy"
    legacy.mkdir()
    legacy_yaml = {
        "display_name": "legacy",
        "engine": {"type": "GlobusComputeEngine", "provider": {"type": "LocalProvider"}},
    }
    (legacy / "config.yaml").write_text(yaml.safe_dump(legacy_yaml))
    refused = cli(env, "start", "legacy", timeout=120)
    assert refused.returncode != 0
    assert "contains an `engine` field; endpoint will not start" in refused.stdout
    assert "Please authenticate" not in refused.stdout


CAMPAIGN = """
jobs:
  - name: digits
    app: parsl_malleable.apps.digits:train_elastic
    epochs: 20
    max_nodes: 8
"""


def test_remote_user_submission_packing(
    endpoint: tuple[dict[str, str], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """``Executor(endpoint_id=..., user_endpoint_config=...)``: what reaches the service.

    A real ``Client`` (no login: a null authorizer, no version check) whose web-service client
    is a mock: the only mock. Function registration and the task batch are packed by the SDK's
    own code; the test unpacks them with the endpoint's serializer and renders the template with
    the options the user sent.
    """
    from globus_compute_sdk import Client, Executor
    from globus_sdk.authorizers import NullAuthorizer

    endpoint_id = uuid.uuid4()
    function_id = str(uuid.uuid4())
    task_id = str(uuid.uuid4())
    client = Client(do_version_check=False, authorizer=NullAuthorizer())
    web = mock.Mock(name="compute web client")
    web.v3.register_function.return_value.data = {"function_uuid": function_id}
    web.v3.submit.return_value.data = {
        "tasks": {function_id: [task_id]},
        "task_group_id": str(uuid.uuid4()),
        "request_id": str(uuid.uuid4()),
        "endpoint_id": str(endpoint_id),
    }
    web.v2.get_result_amqp_url.side_effect = ConnectionError("no Globus service here")
    client._compute_web_client = web
    options = {"profile": "perlmutter", "max_harvested_nodes": 8}
    executor = Executor(endpoint_id=endpoint_id, client=client, user_endpoint_config=options)
    try:
        future = executor.submit(train_campaign, CAMPAIGN, name="digits-gc")
        deadline = time.monotonic() + 30
        while not web.v3.submit.called and time.monotonic() < deadline:
            time.sleep(0.05)
        assert web.v3.submit.called, "the executor sent no batch"
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    del future

    serde = ComputeSerializer()
    (registration,) = web.v3.register_function.call_args.args
    assert registration["function_name"] == "train_campaign"
    (code,) = serde.unpack_buffers(registration["function_code"])
    # By reference (module and name), not by value: the endpoint imports its own installed
    # copy, and nothing but Globus Compute's serializer handles the call.
    pickled = base64.b64decode(code.split("\n", 1)[1])
    assert b"parsl_malleable.campaign.globus_driver" in pickled and len(pickled) < 200, pickled
    assert serde.deserialize(code) is train_campaign

    sent_to, batch = web.v3.submit.call_args.args
    assert str(sent_to) == str(endpoint_id)
    assert batch["user_endpoint_config"] == options
    ((fn_id, payloads),) = batch["tasks"].items()
    assert fn_id == function_id
    (payload,) = payloads
    args, kwargs = (serde.deserialize(b) for b in serde.unpack_buffers(payload))
    assert args == (CAMPAIGN,)  # plain text: the campaign crosses the network as YAML
    assert kwargs == {"name": "digits-gc"}

    # The endpoint accepts what the user sent: its template renders the drivers' engine for
    # the profile and cap the user asked for.
    env, _ = endpoint
    rendered = yaml.safe_load(render(env, tmp_path, batch["user_endpoint_config"]))
    provider = rendered["engine"]["provider"]
    assert provider["type"] == "LocalProvider"
    assert "PM_GLOBUS_SITE=perlmutter PM_GLOBUS_MAX_HARVESTED_NODES=8" in provider["worker_init"]


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
