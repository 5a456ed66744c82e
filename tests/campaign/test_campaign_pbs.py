"""``parsl-malleable run campaign.yaml --site pbs-test`` on the live OpenPBS server: a campaign
written for the emulated site runs on PBS by naming the profile. Blocks start in PBS's login
environment (the driver's interpreter is put first on PATH), a native job that needs most vnodes
arrives while the jobs train and gets them (blocks yield), and the campaign still finishes its
jobs with nothing of ours left on the server."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pbs_server import PBSServer, wait_until

pytestmark = [pytest.mark.pbs, pytest.mark.slow]

CAMPAIGN = """\
site: emulated
time_limit_s: 400
jobs:
  - name: small
    app: parsl_malleable.apps.digits:train_elastic
    epochs: 4
    max_nodes: 2
    checkpoint_every: 20
    args: {lr: 0.05, hidden: [64], step_delay_s: 0.05}
  - name: large
    app: parsl_malleable.apps.digits:train_elastic
    epochs: 4
    max_nodes: 3
    checkpoint_every: 20
    args: {lr: 0.05, hidden: [128, 64], step_delay_s: 0.05}
"""


def blocks_running(pbs: PBSServer) -> int:
    return sum(
        1
        for a in pbs.jobs().values()
        if a["Job_Name"].startswith("pm-block") and a["job_state"] == "R"
    )


def test_a_campaign_runs_on_pbs_by_naming_the_profile_and_finishes_beside_a_native(
    pbs: PBSServer, tmp_path: Path
) -> None:
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(CAMPAIGN)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "parsl_malleable.cli", "run", str(campaign), "--site",
            "pbs-test", "--output", str(out), "--quiet"]  # fmt: skip
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(argv, env={**os.environ, **pbs.env}, stdout=log, stderr=log)
    native = ""
    try:
        assert wait_until(lambda: blocks_running(pbs) >= 3 or proc.poll() is not None, 180)
        assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        width = len(pbs.compute_vnodes()) - 1
        native = pbs.qsub_native(
            "-l", f"select={width}:ncpus=1", "-l", "place=scatter", "-l", "walltime=00:01:00",
            "-o", "/dev/null", "-e", "/dev/null", "--", "/bin/sleep", "5",
        )  # fmt: skip
        assert proc.wait(timeout=420) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    text = (tmp_path / "run.log").read_text()
    assert "2 done, 0 failed of 2" in text, text[-3000:]
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert {r["job"]: r["status"] for r in rows} == {"small": "done", "large": "done"}
    # The native needed vnodes blocks held: the provider's log says which block yielded.
    logs = "".join(p.read_text() for p in out.glob("runinfo/*/parsl_malleable.log"))
    assert " yields: " in logs, logs[-3000:]
    native_end = pbs.jobs(history=True)[native]
    assert native_end["job_state"] == "F" and native_end["Exit_status"] == 0, native_end
    assert wait_until(lambda: not _ours_unfinished(pbs), 60), _ours_unfinished(pbs)


def _ours_unfinished(pbs: PBSServer) -> dict[str, str]:
    return {
        i: a["job_state"]
        for i, a in pbs.jobs().items()
        if a["Job_Name"].startswith("pm-block") and a["job_state"] not in ("F", "X")
    }
