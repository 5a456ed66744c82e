"""A job whose training function raises: its full traceback (the user's file and line) goes into
that job's log file in the output folder, and the results' error column names the file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from tests.campaign import runs

FAILING = Path(__file__).resolve().parents[1] / "elastic" / "failing_training.py"
MARKER = "# <- the user's error"


@pytest.mark.slow
def test_a_failing_jobs_traceback_is_in_its_log_and_the_table_names_it(tmp_path: Path) -> None:
    # The user's own module, beside the campaign (a ``tests`` package elsewhere on sys.path
    # may shadow this repository's).
    (tmp_path / "diverging_app.py").write_text(FAILING.read_text())
    campaign = tmp_path / "failing.yaml"
    campaign.write_text(
        yaml.safe_dump(
            {
                "site": "emulated",
                "python_path": [str(tmp_path)],
                "time_limit_s": 300,
                "jobs": [
                    {
                        "name": "diverges",
                        "app": "diverging_app:train_then_fail",
                        "args": {"fail_at": 3},
                        "max_nodes": 1,
                    }
                ],
            }
        )
    )
    output = tmp_path / "out"
    done = runs.run(campaign, output)
    assert done.returncode != 0 or "failed" in done.stdout + done.stderr, done.stderr[-3000:]
    table = runs.results(output)
    error = str(table.loc["diverges", "error"])
    assert "loss diverged at step 3" in error
    assert "traceback in logs/diverges.log" in error
    log = output / "logs" / "diverges.log"
    text = log.read_text()
    assert "diverging_app.py" in text and MARKER in text, text
    assert "Traceback (most recent call last)" in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
