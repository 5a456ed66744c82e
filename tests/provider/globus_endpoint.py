"""The endpoint admin's side of the Globus tests: ``configure`` the shipped files, render a
user's config, the user endpoint process's environment. All of it is the endpoint's own CLI,
run with a temporary ``HOME`` and ``GLOBUS_COMPUTE_USER_DIR`` (nothing leaks into the real ones).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "configs" / "globus"
ENDPOINT = "harvest"
CLI = str(Path(sys.executable).parent / "globus-compute-endpoint")


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an admin shell whose home and endpoint folder are temporary."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOBUS_", "PYTHONPATH"))}
    env |= {"HOME": str(home), "GLOBUS_COMPUTE_USER_DIR": str(tmp_path / "gc")}
    return env


def cli(
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
    env = cli_env(tmp_path)
    user_env = tmp_path / "user_environment.yaml"
    shipped_env = yaml.safe_load((SHIPPED / "user_environment.yaml").read_text())
    assert set(shipped_env) == {"PYTHONPATH"}
    user_env.write_text(yaml.safe_dump({"PYTHONPATH": str(SHIPPED / "python")}))
    done = cli(
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


def render(env: dict[str, str], tmp_path: Path, options: dict[str, object]) -> str:
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


def user_endpoint_env(env: dict[str, str], ep_dir: Path) -> dict[str, str]:
    """What a user endpoint process gets: the environment plus ``user_environment.yaml``."""
    extra = yaml.safe_load((ep_dir / "user_environment.yaml").read_text())
    return env | {k: str(v) for k, v in extra.items()}
