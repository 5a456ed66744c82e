"""The provider on PBS Pro, through stand-in PBS commands that print recorded documents.

OpenPBS is not packaged for Debian, so qstat/pbsnodes/qsub here are scripts first on PATH
that print the documents of tests/data/pbs/ and log their arguments.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.ledger import Phase
from parsl_malleable.harvest.profile import load_profile
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.pbs import PBSScheduler

PBS_DATA = Path(__file__).resolve().parents[1] / "data" / "pbs"
SNAPSHOT_TIME = 1795994000.0  # while jobs 101, 106 and 107 of qstat.json run


def test_blocks_go_to_the_pbs_queue_with_a_self_signal(
    fake_bin: Callable[[str, str], dict[str, str]], tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    env: dict[str, str] = {}
    for name, doc in [("pbsnodes", "pbsnodes.json"), ("qstat", "qstat.json")]:
        path = shlex.quote(str(PBS_DATA / doc))
        env = fake_bin(name, f'echo "{name} $*" >> {log}; cat {path}')
    env = fake_bin("qsub", f'echo "qsub $*" >> {log}; echo 777.pbs-head')
    profile = load_profile("example-pbs").with_overrides(reservations=False, min_block_s=300)
    scheduler = PBSScheduler(
        queue=profile.queue,
        account=profile.account,
        reservations=False,
        env=env,
        clock=lambda: SNAPSHOT_TIME,
    )
    provider = BackfillProvider(
        profile,
        scheduler=scheduler,
        autostart=False,
        script_dir=str(tmp_path / "blocks"),
        clock=lambda: SNAPSHOT_TIME,
    )
    slot = provider.submit("echo worker", 1, "parsl.htex.block-0")
    report = provider.poll_once()
    assert report.error == "" and report.submitted == ["777.pbs-head"]
    calls = log.read_text().splitlines()
    assert calls[:2] == ["pbsnodes -a -F json", "qstat -f -F json"]
    qsub = next(c for c in calls if c.startswith("qsub "))
    # Job 108 (1 node) takes node01 now; node02 is a hole until job 103 (4 nodes) can start,
    # when job 106 reaches its limit 1000 s from now: 1000 - 180 s margin, whole minutes.
    record = provider.history()[0]
    assert record.planned_nodes == ("node02",) and record.phase is Phase.PENDING
    assert record.walltime_s == 780
    assert f"select={record.nodes_requested}" in qsub and "place=scatter:excl" in qsub
    # Each job's name is unique: the provider's tag, the Parsl block, the submit's number.
    assert provider.tag.startswith("pm-block-backfill-") and record.name == f"{provider.tag}-0-0"
    assert "-q backfill" in qsub and f"-N {record.name}" in qsub
    script = Path(qsub.split()[-1]).read_text()
    assert f"sleep {int(record.walltime_s - profile.signal_margin_s)}" in script
    assert "kill -USR1 $$" in script and "srun" not in script
    assert provider.status([slot])[0].state is P.PENDING
