"""The example apps (``apps/``: digits DDP, CNN, transformer LM) run from the campaign runner
(``configs/examples.yaml``, shortened) and from a plain Parsl script (``scripts/run-examples``).

One epoch each: the point is that each example trains through both entry points and returns
numbers better than chance, not how well it trains (``tests/elastic/test_ddp_resize.py`` does
that for the DDP path).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.campaign import runs

pytestmark = pytest.mark.slow
REPO = runs.REPO


def _check(digits: dict, cnn: dict, lm: dict) -> None:
    assert digits["test_accuracy"] > 0.5, digits  # 10 classes: chance is 0.1
    assert cnn["test_accuracy"] > 0.2, cnn
    # Better than guessing characters uniformly (about 27 of them in the generated text).
    assert 0 < lm["bits_per_char"] < math.log2(27) - 0.5, lm


def test_examples_campaign(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "configs" / "examples.yaml").read_text())
    data.pop("output")
    data["python_path"] = [str(REPO)]
    for job in data["jobs"]:
        # From the checkout (an editable install may map parsl_malleable.apps elsewhere);
        # tests/test_wheel.py imports them as parsl_malleable.apps.
        job["app"] = job["app"].replace("parsl_malleable.apps.", "apps.")
        job["epochs"] = 1
        job["args"]["step_delay_s"] = 0.0
    data["jobs"][2]["args"]["chars"] = 10_000
    campaign = tmp_path / "examples.yaml"
    campaign.write_text(yaml.safe_dump(data))
    done = runs.run(campaign, tmp_path / "out", timeout_s=400)
    assert done.returncode == 0, done.stderr[-4000:]
    table = runs.results(tmp_path / "out")
    assert sorted(table.index) == ["cnn", "digits-ddp", "lm"]
    assert (table["status"] == "done").all(), table
    rows = {
        job: {k.removeprefix("result."): v for k, v in table.loc[job].items()}
        for job in table.index
    }
    _check(rows["digits-ddp"], rows["cnn"], rows["lm"])


def test_examples_from_a_plain_parsl_script(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "run-examples"), "--module-prefix", "apps",
         "--run-dir", str(tmp_path)],
        env=runs.env(), capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    _check(results["digits"], results["cnn"], results["lm"])
