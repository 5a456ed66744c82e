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

import json
import os
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

from parsl_malleable.harvest import backfill_error_handler
from parsl_malleable.provider import BackfillProvider

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "configs" / "globus"
ENDPOINT = "harvest"
CLI = str(Path(sys.executable).parent / "globus-compute-endpoint")


def _cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an admin shell whose home and endpoint folder are temporary."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOBUS_", "PYTHONPATH"))}
    env |= {"HOME": str(home), "GLOBUS_COMPUTE_USER_DIR": str(tmp_path / "gc")}
    return env


def _cli(
    env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``globus-compute-endpoint ARGS`` (stdout and stderr together)."""
    return subprocess.run(
        [CLI, *args],
        env=env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def endpoint(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """``configure`` an endpoint from ``configs/globus``; its admin env and folder.

    ``user_environment.yaml`` is shipped with an example path for the start-up hook; the admin
    (here: the test) points it at the real ``configs/globus/python``.
    """
    env = _cli_env(tmp_path)
    user_env = tmp_path / "user_environment.yaml"
    shipped_env = yaml.safe_load((SHIPPED / "user_environment.yaml").read_text())
    assert set(shipped_env) == {"PYTHONPATH"}
    user_env.write_text(yaml.safe_dump({"PYTHONPATH": str(SHIPPED / "python")}))
    done = _cli(
        env,
        "configure",
        ENDPOINT,
        "--contact-email",
        "admin@example.org",
        "--core-config",
        str(SHIPPED / "config.yaml"),
        "--template-config",
        str(SHIPPED / "user_config_template.yaml.j2"),
        "--schema-config",
        str(SHIPPED / "user_config_schema.json"),
        "--user-env-config",
        str(user_env),
    )
    assert done.returncode == 0, done.stdout
    ep_dir = tmp_path / "gc" / ENDPOINT
    for name in ("user_config_template.yaml.j2", "user_config_schema.json"):
        assert (ep_dir / name).read_text() == (SHIPPED / name).read_text()
    return env, ep_dir


def _render(env: dict[str, str], tmp_path: Path, options: dict[str, object]) -> str:
    """The user config the manager endpoint would render for a user sending ``options``."""
    opts = tmp_path / "opts.json"
    opts.write_text(json.dumps(options))
    done = subprocess.run(
        [CLI, "render-user-config", "--endpoint", ENDPOINT, "--user-options", str(opts)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _user_endpoint_env(env: dict[str, str], ep_dir: Path) -> dict[str, str]:
    """What a user endpoint process gets: the environment plus ``user_environment.yaml``."""
    extra = yaml.safe_load((ep_dir / "user_environment.yaml").read_text())
    return env | {k: str(v) for k, v in extra.items()}


_LOAD = """
import json, sys
from globus_compute_endpoint.endpoint.config.utils import load_config_yaml
config = load_config_yaml(sys.stdin.read())
engine = config.engine
provider = engine.executor.provider
print(json.dumps({
    "config": type(config).__name__,
    "engine": type(engine).__name__,
    "provider": type(provider).__module__ + "." + type(provider).__qualname__,
    "profile": provider.profile.name,
    "max_nodes": provider.profile.max_nodes,
    "slots": [provider.init_blocks, provider.min_blocks, provider.max_blocks],
    "workers": engine.executor.max_workers_per_node,
    "heartbeat": [engine.executor.heartbeat_period, engine.executor.heartbeat_threshold],
}))
"""


def test_template_loads_with_backfill_provider(
    endpoint: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """Rendered by the endpoint, loaded by its ``load_config_yaml`` in a user endpoint's env."""
    env, ep_dir = endpoint
    rendered = _render(env, tmp_path, {"profile": "slurm-test", "max_nodes": 3})
    assert "type: BackfillProvider" in rendered
    done = subprocess.run(
        [sys.executable, "-c", _LOAD],
        env=_user_endpoint_env(env, ep_dir),
        input=rendered,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == {
        "config": "UserEndpointConfig",
        "engine": "GlobusComputeEngine",
        "provider": "parsl_malleable.provider.BackfillProvider",
        "profile": "slurm-test",
        "max_nodes": 3,
        "slots": [3, 3, 3],  # the profile's max_blocks: the provider owns block counts
        "workers": 1,
        "heartbeat": [2, 10],
    }
    # Without the start-up hook (no PYTHONPATH from user_environment.yaml) the same YAML is
    # refused by the endpoint's dispatcher: the hook is what makes the name resolve.
    bare = subprocess.run(
        [sys.executable, "-c", _LOAD],
        env=env,
        input=rendered,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bare.returncode != 0
    assert "'BackfillProvider' is not a valid provider" in bare.stderr


def test_template_defaults_and_schema(
    endpoint: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """No options: the site's default profile. Options outside the schema are refused."""
    env, _ = endpoint
    rendered = yaml.safe_load(_render(env, tmp_path, {}))
    assert rendered["engine"]["provider"] == {
        "type": "BackfillProvider",
        "profile": "example-slurm",
    }
    opts = tmp_path / "bad.json"
    for bad in ({"queue": "debug"}, {"profile": "../../etc/x"}, {"max_nodes": 0}):
        opts.write_text(json.dumps(bad))
        done = _cli(env, "render-user-config", "--endpoint", ENDPOINT, "--user-options", str(opts))
        assert done.returncode != 0, bad
        assert "Failed to render user configuration template" in done.stdout, done.stdout


def test_user_endpoint_process_gets_past_config_validation(
    endpoint: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """``_start-user-endpoint`` (what the manager execs per user) loads the rendered config.

    It then stops at the credentials the manager would pass it after registering with the
    cloud service (unreachable here): "No credential info provided".
    """
    env, ep_dir = endpoint
    rendered = _render(env, tmp_path, {"profile": "slurm-test"})
    stdin = json.dumps({"ep_info": {}, "config": rendered})
    uep_env = _user_endpoint_env(env, ep_dir)
    done = _cli(uep_env, "_start-user-endpoint", ENDPOINT, stdin=stdin, timeout=120)
    assert done.returncode != 0
    assert "No credential info provided" in done.stdout, done.stdout
    assert "make_credential_provider" in done.stdout
    assert "not a valid provider" not in done.stdout
    assert "Endpoint will not start" not in done.stdout
    # The control: the same process without user_environment.yaml fails at the config.
    bare = _cli(env, "_start-user-endpoint", ENDPOINT, stdin=stdin, timeout=120)
    assert "'BackfillProvider' is not a valid provider" in bare.stdout, bare.stdout
    assert "No credential info provided" not in bare.stdout


def test_manager_endpoint_start_gets_to_registration(
    endpoint: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """``start`` validates config.yaml, then registers with the cloud service: a Globus login
    is asked for, which no one answers here (stdin is empty), so it aborts there."""
    env, _ = endpoint
    done = _cli(env, "start", ENDPOINT, timeout=120)
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
    refused = _cli(env, "start", "legacy", timeout=120)
    assert refused.returncode != 0
    assert "contains an `engine` field; endpoint will not start" in refused.stdout
    assert "Please authenticate" not in refused.stdout


def train_on_harvest(profile: str, epochs: int, max_nodes: int = 4) -> dict[str, float]:
    """What a remote user sends: a Parsl driver that trains the digits MLP on harvested nodes.

    It runs as one task on the endpoint and loads its own Parsl config there, since a
    malleable app needs a driver (its controller and coordinator) that the engine's executor
    does not provide.
    """
    import parsl
    from parsl.config import Config

    from apps.digits import train_elastic
    from parsl_malleable.app import malleable_app
    from parsl_malleable.provider import BackfillProvider, harvest_executor

    provider = BackfillProvider(profile)
    with parsl.load(Config(executors=[harvest_executor(provider)], retries=2)):
        train = malleable_app(min_nodes=1, max_nodes=max_nodes, checkpoint_dir="~/ckpt/digits-gc")(
            train_elastic
        )
        return train(epochs=epochs).result()


def test_remote_user_submission_packing(
    endpoint: tuple[dict[str, str], Path], tmp_path: Path
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
    options = {"profile": "perlmutter", "max_nodes": 8}
    executor = Executor(endpoint_id=endpoint_id, client=client, user_endpoint_config=options)
    try:
        future = executor.submit(train_on_harvest, "perlmutter", epochs=20, max_nodes=8)
        deadline = time.monotonic() + 30
        while not web.v3.submit.called and time.monotonic() < deadline:
            time.sleep(0.05)
        assert web.v3.submit.called, "the executor sent no batch"
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    del future

    serde = ComputeSerializer()
    (registration,) = web.v3.register_function.call_args.args
    assert registration["function_name"] == "train_on_harvest"
    (code,) = serde.unpack_buffers(registration["function_code"])
    shipped_fn = serde.deserialize(code)
    assert callable(shipped_fn)
    assert shipped_fn.__name__ == "train_on_harvest"

    sent_to, batch = web.v3.submit.call_args.args
    assert str(sent_to) == str(endpoint_id)
    assert batch["user_endpoint_config"] == options
    ((fn_id, payloads),) = batch["tasks"].items()
    assert fn_id == function_id
    (payload,) = payloads
    args, kwargs = (serde.deserialize(b) for b in serde.unpack_buffers(payload))
    assert args == ("perlmutter",)
    assert kwargs == {"epochs": 20, "max_nodes": 8}

    # The endpoint accepts what the user sent: its template renders with these options.
    env, _ = endpoint
    rendered = yaml.safe_load(_render(env, tmp_path, batch["user_endpoint_config"]))
    assert rendered["engine"]["provider"] == {
        "type": "BackfillProvider",
        "profile": "perlmutter",
        "max_nodes": 8,
    }


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
