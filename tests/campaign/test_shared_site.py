"""A shared login node: another local user can neither act as the campaign's user nor read what a
run writes. The tests create a second Unix account and act as it (CI runs as root; elsewhere
they are skipped with the reason).

What another user tried on the old code, and what each test now checks:
- a group-writable output folder let them plant files (the old ``lifeline.json`` named the command
  the watchdog ran as the user when the driver died): the folder is refused, with its mode and
  the fix, before anything is read or written; a planted file is never run;
- Parsl's ``parsl.log`` was 0644 and held the agent link's token: nothing a run writes can be
  opened by another user (the folder is 0700, no file has group or other bits);
- a file planted while the folder was open, before the user closed it, is refused when read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from parsl_malleable.errors import UnsafePathError
from parsl_malleable.private_files import private_dir, read_private_bytes
from tests.campaign import runs

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating a second Unix account needs root (CI runs as root)"
)

APP = "apps.digits:train_elastic"
# The other user cannot reach this interpreter if it lives in root's home (pyenv): the code it
# runs needs the standard library only.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


@dataclass(frozen=True)
class OtherUser:
    """A second local account, and a way to run commands as it."""

    name: str
    uid: int
    gid: int

    def run(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run Python ``code`` as this user (no extra groups, a neutral working folder)."""
        return subprocess.run(
            [SYSTEM_PYTHON, "-I", "-c", code, *args],
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": "/"},
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="module")
def other_user() -> Iterator[OtherUser]:
    name = f"pmo{uuid.uuid4().hex[:8]}"
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    subprocess.run(
        ["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        ids = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True)
        gids = subprocess.run(["id", "-g", name], capture_output=True, text=True, check=True)
        yield OtherUser(name, int(ids.stdout), int(gids.stdout))
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def project(other_user: OtherUser) -> Iterator[Path]:
    """A project directory both users can reach (``/tmp/pytest-of-root`` is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="pm-project-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def campaign_file(folder: Path, *, epochs: int = 1, time_limit_s: float = 5) -> Path:
    path = folder / "campaign.yaml"
    data = {
        "site": "emulated",
        "python_path": [str(runs.REPO)],
        "time_limit_s": time_limit_s,
        "jobs": [{"name": "digits", "app": APP, "epochs": epochs, "checkpoint_every": 5}],
    }
    path.write_text(yaml.safe_dump(data))
    return path


PLANT = """
import json, os, sys
folder, marker = sys.argv[1], sys.argv[2]
with open(os.path.join(folder, "lifeline.json"), "w") as f:
    json.dump({"processes": [], "groups": [], "cancel_argv": ["touch", marker],
               "job_ids": ["1"]}, f)
os.symlink("/etc/shadow", os.path.join(folder, "state.sqlite"))
print("planted")
"""


def test_a_folder_another_user_can_write_is_refused_before_anything_runs(
    project: Path, other_user: OtherUser
) -> None:
    output = project / "out"
    output.mkdir()
    os.chown(output, -1, other_user.gid)
    os.chmod(output, 0o770)  # the project group's folder
    marker = project / "pwned"
    planted = other_user.run(PLANT, str(output), str(marker))
    assert planted.stdout.strip() == "planted", planted.stderr
    campaign = campaign_file(project)
    done = subprocess.run(
        runs.command(campaign, output), env=runs.env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "mode is 0770" in done.stderr and "chmod 700" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    # Refused before anything was read or written: the planted files are as they were.
    assert sorted(p.name for p in output.iterdir()) == ["lifeline.json", "state.sqlite"]
    assert stat.S_IMODE(output.stat().st_mode) == 0o770
    assert not marker.exists()


def test_a_folder_of_another_user_is_refused_and_one_others_can_only_read_is_narrowed(
    project: Path, other_user: OtherUser
) -> None:
    theirs = project / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other_user.uid, other_user.gid)
    with pytest.raises(UnsafePathError, match=f"belongs to uid {other_user.uid}"):
        private_dir(theirs)
    mine = project / "mine"
    mine.mkdir()
    os.chmod(mine, 0o755)
    private_dir(mine)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    link = project / "link"
    link.symlink_to(mine)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        private_dir(link)


def test_a_file_planted_while_the_folder_was_open_is_refused_when_read(
    project: Path, other_user: OtherUser
) -> None:
    """The user closed the folder (chmod 700) after another user had planted a campaign state in
    it: the run refuses the file, naming it and its owner, instead of trusting it."""
    output = project / "out"
    output.mkdir()
    os.chmod(output, 0o777)
    planted = other_user.run(
        "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('CREATE TABLE t (x)')",
        str(output / "state.sqlite"),
    )
    assert planted.returncode == 0, planted.stderr
    os.chmod(output, 0o700)
    campaign = campaign_file(project)
    done = subprocess.run(
        runs.command(campaign, output), env=runs.env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert f"state.sqlite: it belongs to uid {other_user.uid}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(UnsafePathError, match="belongs to uid"):
        read_private_bytes(output / "state.sqlite")


def _unreadable_by(other_user: OtherUser, paths: list[Path]) -> list[str]:
    """The paths ``other_user`` could open (read) or list; [] when none."""
    code = (
        "import json, os, sys\n"
        "opened = []\n"
        "for p in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        os.listdir(p) if os.path.isdir(p) else open(p, 'rb').close()\n"
        "        opened.append(p)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps(opened))\n"
    )
    done = other_user.run(code, json.dumps([str(p) for p in paths]))
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def _wait(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_another_user_reads_nothing_of_a_run_and_a_planted_file_runs_nothing(
    project: Path, other_user: OtherUser
) -> None:
    """A real run: while it trains, another user can open none of its files (Parsl's log with
    the task arguments included) and cannot plant one; a ``lifeline.json`` planted by root in
    the old format, owned by the other user, is not run when the driver is killed; nothing of
    the run is left 60 s after the kill."""
    output = project / "out"
    campaign = campaign_file(project, epochs=200, time_limit_s=600)
    driver = subprocess.Popen(
        runs.command(campaign, output),
        env=runs.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = project / "pwned"
    try:
        assert _wait(lambda: bool(list(output.glob("runinfo/*/parsl.log"))), 240)
        assert _wait(lambda: bool(runs.query(output, "SELECT 1 FROM job_samples LIMIT 1")), 240)
        assert stat.S_IMODE(output.stat().st_mode) == 0o700
        written = [output, *output.rglob("*")]
        assert _unreadable_by(other_user, written) == []
        loose = [
            str(p)
            for p in written
            if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
        ]
        assert loose == [], "files a run wrote with group or other permission bits"
        tried = other_user.run(
            "import sys; open(sys.argv[1], 'w').write('{}')", str(output / "lifeline.json")
        )
        assert tried.returncode != 0 and "Permission denied" in tried.stderr
        # The old attack, planted as root could still do it: the watchdog reads no file.
        lifeline = output / "lifeline.json"
        lifeline.write_text(json.dumps({"cancel_argv": ["touch", str(marker)], "job_ids": ["1"]}))
        os.chown(lifeline, other_user.uid, other_user.gid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        assert _wait(lambda: not runs.processes_of(output, 1), 60), runs.processes_of(output, 1)
        assert not marker.exists(), "the watchdog ran a command from a planted file"
    finally:
        runs.kill(runs.processes_of(output, 1))
        if driver.poll() is None:
            driver.kill()


# ------------------------------------------------------------------------------------------------
# Nothing is imported from the folder the user runs from (issue 49). Another user planted
# packages named ``parsl_malleable`` and ``multiprocessing`` in a shared folder the user started a
# campaign from: the watchdog (``python -m``) and the worker pools' resource trackers
# (``python -c``) put their working folder, inherited from the driver, first on ``sys.path``
# and imported them as the user.

PLANTED_PACKAGES = ("parsl_malleable", "multiprocessing")

PLANT_PACKAGES = """
import os, sys
folder, markers = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    os.mkdir(os.path.join(folder, name))
    marker = os.path.join(markers, "pwned-" + name)
    with open(os.path.join(folder, name, "__init__.py"), "w") as f:
        f.write("import os, sys\\n")
        f.write(f"open({marker!r}, 'a').write(repr((os.getuid(), sys.argv)) + '\\\\n')\\n")
print("planted")
"""


@dataclass(frozen=True)
class SharedFolder:
    """A folder everyone may write (the user's working folder) with packages planted in it by
    another user, and where the planted packages leave a marker when imported."""

    cwd: Path
    markers: Path

    def imported(self) -> dict[str, str]:
        """Planted package -> what its marker recorded (uid and argv of each importer)."""
        return {p.name: p.read_text() for p in sorted(self.markers.glob("pwned-*"))}


@pytest.fixture
def shared_folder(project: Path, other_user: OtherUser) -> SharedFolder:
    cwd = project / "shared"
    markers = project / "markers"
    for folder in (cwd, markers):
        folder.mkdir()
        os.chmod(folder, 0o777)  # any process importing a planted package may leave its mark
    planted = other_user.run(PLANT_PACKAGES, str(cwd), str(markers), *PLANTED_PACKAGES)
    assert planted.stdout.strip() == "planted", planted.stderr
    assert all(
        (cwd / name / "__init__.py").stat().st_uid == other_user.uid for name in PLANTED_PACKAGES
    )
    return SharedFolder(cwd, markers)


def _console_command(campaign: Path, output: Path) -> list[str]:
    """``runs.command`` through the ``parsl-malleable`` console script: ``python -m`` would put
    the shared folder first on the driver's own path, which is the user's own choice."""
    script = Path(sys.executable).with_name("parsl-malleable")
    assert script.is_file(), f"{script}: the project's console script is not installed"
    argv = runs.command(campaign, output)
    assert argv[1:3] == ["-m", "parsl_malleable"]
    return [str(script), *argv[3:]]


def _plain_env() -> dict[str, str]:
    """``runs.env()`` without ``PYTHONSAFEPATH``: a driver run earlier in this test process
    leaves it set, which would hide what the run itself fails to set."""
    return {k: v for k, v in runs.env().items() if k != "PYTHONSAFEPATH"}


def _ran_to_the_end(output: Path) -> None:
    """The run trained its job: the results table says so."""
    table = runs.results(output)
    assert list(table.index) == ["digits"]
    assert table.loc["digits", "status"] == "done", table.to_dict("records")


@pytest.mark.slow
def test_the_command_imports_nothing_from_a_shared_working_folder(
    project: Path, shared_folder: SharedFolder
) -> None:
    output = project / "out"
    campaign = campaign_file(project, epochs=1, time_limit_s=240)
    done = subprocess.run(
        _console_command(campaign, output),
        cwd=shared_folder.cwd,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert shared_folder.imported() == {}, "a process of the run imported a planted package"
        assert done.returncode == 0, done.stderr[-3000:]
        _ran_to_the_end(output)
    finally:
        runs.kill(runs.processes_of(output, 1))


DRIVER_SCRIPT = """
import sys
from parsl_malleable.campaign import run_campaign

table = run_campaign(sys.argv[1], sys.argv[2])
print(table.attrs["outcome"])
"""


@pytest.mark.slow
def test_run_campaign_imports_nothing_from_a_shared_working_folder(
    project: Path, shared_folder: SharedFolder
) -> None:
    """The Python API, from a script of the user's (its own folder first on its path, as
    Python puts it) started in the shared folder."""
    scripts = project / "mine"
    scripts.mkdir(mode=0o700)
    driver = scripts / "drive.py"
    driver.write_text(DRIVER_SCRIPT)
    output = project / "out"
    campaign = campaign_file(project, epochs=1, time_limit_s=240)
    done = subprocess.run(
        [sys.executable, str(driver), str(campaign), str(output)],
        cwd=shared_folder.cwd,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert shared_folder.imported() == {}, "a process of the run imported a planted package"
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1:] == ["finished"], done.stdout
        _ran_to_the_end(output)
    finally:
        runs.kill(runs.processes_of(output, 1))
