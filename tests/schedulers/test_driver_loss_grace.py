"""The emulated site at its driver's death: a node's group gets SIGTERM, a grace to finish
(a rank's last checkpoint), then SIGKILL; nothing outlives the grace (#34)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from parsl_malleable.schedulers.emulated.node_wrapper import DRIVER_LOSS_GRACE_S, group_members
from tests.provider.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]

_DRIVER = """
import sys, time
from pathlib import Path
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.emulated.native_load import NativeSchedule

site = EmulatedSite(EmulatedSettings(nodes=1), schedule=NativeSchedule((), time.time(), 0, 1, 1))
job = site.submit(Path(sys.argv[1]), nodes=1, walltime_s=300, node_ids=["vn1"], name="pm-block-g")
print(*[p.pid for p in site.block(job).procs.values()], flush=True)
time.sleep(300)
"""

# A "rank" that needs 2 s after SIGTERM to write its checkpoint (the old wrapper killed the
# group 1 s after TERM at most, as soon as the batch shell was gone), and a process that ignores
# SIGTERM, which only the KILL after the grace ends.
_BLOCK = """
saver() {{
    trap 'sleep 2; echo saved > {saved}; exit 0' TERM
    echo ready > {ready}
    while :; do sleep 0.1; done
}}
saver &
(trap '' TERM; exec sleep 300) &
wait
"""


def test_a_dead_drivers_blocks_get_a_grace_to_save_then_nothing_is_left(tmp_path: Path) -> None:
    saved, ready = tmp_path / "saved", tmp_path / "ready"
    script = tmp_path / "block.sh"
    script.write_text("#!/bin/bash\n" + _BLOCK.format(saved=saved, ready=ready))
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert driver.stdout is not None
        (group,) = [int(p) for p in driver.stdout.readline().split()]
        assert wait_for(ready.exists, 20)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        killed = time.monotonic()
        assert wait_for(lambda: not group_members(group), DRIVER_LOSS_GRACE_S + 10)
        gone_after = time.monotonic() - killed
    finally:
        driver.kill()
        driver.wait()
    assert saved.read_text().strip() == "saved"  # the save in progress was not cut
    # The process that ignored TERM lived until the KILL at the end of the grace, no longer.
    assert DRIVER_LOSS_GRACE_S - 1 <= gone_after <= DRIVER_LOSS_GRACE_S + 10
