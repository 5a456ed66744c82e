"""A run whose blocks all fail (a broken ``worker_init``, a TMPDIR too long for the worker
pool's socket, a missing module on the nodes) ends as soon as the provider stops launching,
saying why and where the blocks' output is, instead of waiting for its time limit."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.campaign import runs

pytestmark = pytest.mark.slow


def test_a_run_whose_blocks_keep_failing_ends_at_once_and_says_where_to_look(tmp_path: Path):
    campaign = runs.small_demo(tmp_path)
    data = yaml.safe_load(campaign.read_text())
    data["site_overrides"]["worker_init"] = "echo 'broken on purpose' >&2; exit 3"
    data["time_limit_s"] = 900
    campaign.write_text(yaml.safe_dump(data))
    output = tmp_path / "out"
    began = time.monotonic()
    done = runs.run(campaign, output)
    took = time.monotonic() - began
    assert done.returncode == 3, done.stderr[-4000:]
    assert took < 300, f"the run waited {took:.0f} s for blocks that could not come"
    said = done.stdout + done.stderr
    assert re.search(r"no more blocks: [0-9]+ blocks failed in a row", said), said[-3000:]
    assert "unfinished jobs can resume" in said
    outcome = runs.query(output, "SELECT value FROM meta WHERE key = 'run1_outcome'")
    assert outcome == [("blocks failing",)]
    # The place the message names holds the blocks' output, with the reason in it.
    script_dir = next(p for p in output.rglob("submit_scripts") if p.is_dir())
    assert str(script_dir) in said
    outputs = [p.read_text() for p in script_dir.glob("*.out")]
    assert outputs and any("broken on purpose" in text for text in outputs)
    statuses = {status for (status,) in runs.query(output, "SELECT status FROM jobs")}
    assert "done" not in statuses


def test_a_tmpdir_too_long_for_the_pools_sockets_is_refused_before_anything_starts(
    tmp_path: Path,
):
    """The CI hang of session 14: a long TMPDIR made every worker pool fail. It is now said
    at once, with the limit and the fix, and nothing is started."""
    campaign = runs.small_demo(tmp_path)
    long_tmp = tmp_path / ("t" * 80)
    long_tmp.mkdir()
    output = tmp_path / "out"
    done = subprocess.run(
        runs.command(campaign, output),
        env={**runs.env(), "TMPDIR": str(long_tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    assert "too long for the worker pools' sockets" in said and "set TMPDIR" in said, said
    assert not (output / "state.sqlite").exists()
