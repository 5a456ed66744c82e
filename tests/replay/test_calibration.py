"""The calibration file: measured start-up and pauses, applied to a replay, bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.calibration import (
    Calibration,
    apply_calibration,
    load_calibration,
    save_calibration,
)
from parsl_malleable.replay.command import replay as replay_command
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.policies import make_policy
from tests.replay.test_engine import job, timeline


def test_round_trip(tmp_path: Path) -> None:
    calibration = Calibration(6.5, 0.4, 0.2, measured_by="bench", samples=8)
    save_calibration(calibration, tmp_path / "c.json")
    assert load_calibration(tmp_path / "c.json") == calibration


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "Expecting"),
        ("[1, 2]", "expected a JSON object"),
        ('{"node_start_s": 1.0, "scale_up_s": 0.1}', "scale_down_s"),
        ('{"node_start_s": -1, "scale_up_s": 0.1, "scale_down_s": 0.1}', "node_start_s"),
        ('{"node_start_s": 1, "scale_up_s": 0.1, "scale_down_s": 0.1, "typo": 1}', "typo"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_calibration(path)
    assert str(path) in str(info.value)


def test_nodes_train_late_and_pause_as_measured() -> None:
    # Node 0 idle 1-5000 s, node 1 idle 1-200 s and 300-305 s (too short once started late),
    # node 2 idle from before the timeline's start (0 s) to 10 s: kept as it is.
    tl = timeline([(0, 1.0, 5000.0), (1, 1.0, 200.0), (1, 300.0, 305.0), (2, 0.0, 10.0)])
    late, jobs = apply_calibration(tl, [job()], Calibration(6.0, 0.5, 0.25))
    assert list(late.start) == [7.0, 7.0, 0.0]
    assert list(late.end) == [5000.0, 200.0, 10.0]
    late = late.first_nodes(2)
    assert (jobs[0].scale_up_s, jobs[0].scale_down_s) == (0.5, 0.25)
    (outcome,) = Replay(late, jobs, make_policy("freetrain")).run().jobs
    # 7 s late, a 0.5 s pause, 20/s to 200 s (3,850), 0.25 s pause, then 10/s: 6,150 left.
    assert outcome.finished == pytest.approx(200.25 + 615.0)
    assert outcome.paused_s == pytest.approx(0.75)


def test_the_replay_command_takes_a_calibration(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save_calibration(Calibration(30.0, 1.0, 1.0), path)
    args = ["--nodes", "20", "--days", "0.05", "--jobs", "3", "--policy", "freetrain"]
    plain = CliRunner().invoke(replay_command, args)
    calibrated = CliRunner().invoke(replay_command, [*args, "--calibration", str(path)])
    assert plain.exit_code == 0, plain.output
    assert calibrated.exit_code == 0, calibrated.output
    assert "start 30.0 s late" in calibrated.output
    assert "start 30.0 s late" not in plain.output
    path.write_text(json.dumps({"node_start_s": "soon"}))
    broken = CliRunner().invoke(replay_command, [*args, "--calibration", str(path)])
    assert broken.exit_code != 0
    assert "calibration" in broken.output
