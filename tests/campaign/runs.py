"""Helpers for the campaign run tests: a small demo campaign, the command, its processes."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[2]
RUN_ENV = "PM_CAMPAIGN_RUN"
EPOCHS = 10


def small_demo(tmp: Path, *, site: str | None = None, step_delay_s: float = 0.045) -> Path:
    """configs/demo.yaml at a smaller size: two sweep points and the deep job, fewer epochs,
    checkpoints every 10 commits; written into ``tmp``. Steps are paced so that the campaign
    outlasts the natives' first 40 s (at 0.03 s a step it ended before any block had to go)."""
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["python_path"] = [str(REPO)]
    data["output"] = None
    sweep = data["sweeps"][0]
    sweep["grid"] = {"lr": [0.05], "hidden": [[64], [128]]}
    for entry in [sweep, *data["jobs"]]:
        entry["epochs"] = EPOCHS
        entry["checkpoint_every"] = 10
        entry.setdefault("args", {})["step_delay_s"] = step_delay_s
    if site is not None:
        data["site"] = site
        data["site_overrides"] = {}
    else:
        # A stretch of the generated workload where natives start and end within the first
        # 40 s, so that blocks must yield while the shorter jobs train.
        data["site_overrides"] = {"emulated": {"seed": 5}}
    path = tmp / "small-demo.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in data.items() if v is not None}))
    return path


def command(campaign: Path, output: Path, *extra: str) -> list[str]:
    """The ``parsl-malleable run`` command line."""
    return [
        sys.executable,
        "-m",
        "parsl_malleable",
        "run",
        str(campaign),
        "-o",
        str(output),
        "--quiet",
        *extra,
    ]


def env() -> dict[str, str]:
    """The environment for the command: HTEX finds its scripts on PATH."""
    bin_dir = os.path.dirname(sys.executable)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def run(
    campaign: Path, output: Path, *extra: str, timeout_s: float = 480
) -> subprocess.CompletedProcess:
    """Run the command to its end."""
    return subprocess.run(
        command(campaign, output, *extra),
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def results(output: Path) -> pd.DataFrame:
    """The results table, indexed by job."""
    return pd.read_csv(output / "results.csv").set_index("job")


def query(output: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a read-only query on the campaign state (empty while it does not exist)."""
    path = output / "state.sqlite"
    if not path.exists():
        return []
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []


def processes_of(output: Path, run: int) -> list[int]:
    """Pids of live processes started by run ``run`` of the campaign in ``output``."""
    tag = f"{RUN_ENV}={output.resolve()}#{run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and tag in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill(pids: list[int]) -> None:
    """SIGKILL what is left (test clean-up only)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
