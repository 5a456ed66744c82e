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


def _run_trains_importing_nothing_planted(
    argv: list[str], shared_folder: SharedFolder, output: Path
) -> subprocess.CompletedProcess[str]:
    """Run the driver ``argv`` from the shared folder: no process of it imported a planted
    package, and it trained its job to the end into ``output``; what it printed."""
    done = subprocess.run(
        argv,
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
    return done


@pytest.mark.slow
def test_the_command_imports_nothing_from_a_shared_working_folder(
    project: Path, shared_folder: SharedFolder
) -> None:
    output = project / "out"
    campaign = campaign_file(project, epochs=1, time_limit_s=240)
    _run_trains_importing_nothing_planted(_console_command(campaign, output), shared_folder, output)


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
    done = _run_trains_importing_nothing_planted(
        [sys.executable, str(driver), str(campaign), str(output)], shared_folder, output
    )
    assert done.stdout.split()[-1:] == ["finished"], done.stdout


# ------------------------------------------------------------------------------------------------
# No other user runs code as the user (issue 49). Another user who could write a folder the
# user works in planted a dangling link named like an example (``init`` wrote the user's file
# where it pointed, ``init --force`` overwrote a 0600 file through it), re-pointed a campaign
# file at her own (``validate`` imported her module as the user), planted a ``checkpoints`` link
# in a finished folder that had become group-writable (``retry --from-scratch`` deleted a folder
# outside the run) and a FIFO as ``driver.lock`` (``status`` and ``retry`` hung).

HER_MODULE = (
    "import pathlib\npathlib.Path({marker!r}).write_text('imported')\n\ndef train(ctx): pass\n"
)

PLANT_CAMPAIGN = """
import os, sys
folder, marker, module = sys.argv[1], sys.argv[2], sys.argv[3]
with open(os.path.join(folder, module + ".py"), "w") as f:
    f.write(sys.argv[4].format(marker=marker))
with open(os.path.join(folder, "campaign.yaml"), "w") as f:
    f.write("site: emulated\\npython_path: [%s]\\njobs: [{name: j, app: '%s:train'}]\\n"
            % (folder, module))
print("planted")
"""


def _cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``parsl-malleable ARGS`` as the user (root), with a timeout: a hang fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "parsl_malleable", *args],
        env=runs.env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd="/",
    )


def _refused(done: subprocess.CompletedProcess[str], *expected: str) -> None:
    """The command failed with one line saying each of ``expected``, and no traceback."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def _open_folder(project: Path, other_user: OtherUser, name: str) -> Path:
    """A project folder of the user that the other user's group may write (mode 0770)."""
    folder = project / name
    folder.mkdir()
    os.chown(folder, -1, other_user.gid)
    os.chmod(folder, 0o770)
    return folder


@dataclass(frozen=True)
class HerCampaign:
    """A campaign of the other user's, in her own folder, whose app leaves ``marker`` when
    imported."""

    file: Path
    folder: Path
    marker: Path


@pytest.fixture
def her_campaign(project: Path, other_user: OtherUser) -> HerCampaign:
    folder = project / "hers"
    folder.mkdir(mode=0o755)
    os.chown(folder, other_user.uid, other_user.gid)
    markers = project / "markers-49"
    markers.mkdir(mode=0o777)
    os.chmod(markers, 0o777)  # whoever imports her module (as whom) leaves the marker
    marker = markers / "imported"
    module = f"pm_hers_{uuid.uuid4().hex[:8]}"
    planted = other_user.run(PLANT_CAMPAIGN, str(folder), str(marker), module, HER_MODULE)
    assert planted.stdout.strip() == "planted", planted.stderr
    return HerCampaign(folder / "campaign.yaml", folder, marker)


def test_init_refuses_a_dangling_link_she_planted_and_writes_nothing_at_its_target(
    project: Path, other_user: OtherUser
) -> None:
    shared = _open_folder(project, other_user, "shared")
    private = project / "private"
    private.mkdir(mode=0o700)
    victim = private / "authorized_keys"  # dangling: she cannot even see into the folder
    planted = other_user.run(
        "import os, sys; os.symlink(sys.argv[1], sys.argv[2]); print('planted')",
        str(victim),
        str(shared / "asha.yaml"),
    )
    assert planted.stdout.strip() == "planted", planted.stderr
    done = _cli("init", str(shared), "--example", "asha")
    _refused(done, f"{shared / 'asha.yaml'} is a symbolic link", "refusing to write through it")
    assert not victim.exists() and not victim.is_symlink()


def test_init_force_refuses_a_link_and_leaves_the_file_it_points_at(
    project: Path, other_user: OtherUser
) -> None:
    shared = _open_folder(project, other_user, "shared")
    private = project / "private"
    private.mkdir(mode=0o700)
    victim = private / "secret"
    victim.write_text("the user's own")
    victim.chmod(0o600)
    planted = other_user.run(
        "import os, sys; os.symlink(sys.argv[1], sys.argv[2]); print('planted')",
        str(victim),
        str(shared / "demo.yaml"),
    )
    assert planted.stdout.strip() == "planted", planted.stderr
    _refused(_cli("init", str(shared), "--force"), "is a symbolic link")
    assert victim.read_text() == "the user's own"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def _validate_and_run_refuse(campaign: Path, output: Path, *expected: str) -> None:
    _refused(_cli("validate", str(campaign)), *expected)
    _refused(_cli("run", str(campaign), "-o", str(output), "--quiet", timeout_s=120), *expected)
    assert not output.exists(), "a refused campaign made its output folder"


def test_a_link_to_her_campaign_is_refused_and_her_module_never_imported(
    project: Path, her_campaign: HerCampaign
) -> None:
    mine = project / "mine"
    mine.mkdir(mode=0o755)
    link = mine / "campaign.yaml"
    link.symlink_to(her_campaign.file)
    _validate_and_run_refuse(
        link,
        project / "out",
        f"refusing the campaign file {link}: it is a symbolic link to {her_campaign.file}",
        "belongs to uid",
    )
    assert not her_campaign.marker.exists(), "her module was imported as the user"


def test_a_campaign_file_she_owns_is_refused_and_her_module_never_imported(
    project: Path, other_user: OtherUser, her_campaign: HerCampaign
) -> None:
    mine = project / "mine"
    mine.mkdir(mode=0o755)
    copy = mine / "campaign.yaml"
    shutil.copy(her_campaign.file, copy)
    os.chown(copy, other_user.uid, other_user.gid)
    _validate_and_run_refuse(
        copy,
        project / "out",
        f"refusing the campaign file {copy}: it belongs to uid {other_user.uid}",
    )
    assert not her_campaign.marker.exists(), "her module was imported as the user"


def test_a_campaign_file_in_a_folder_she_can_write_is_refused(
    project: Path, other_user: OtherUser, her_campaign: HerCampaign
) -> None:
    shared = _open_folder(project, other_user, "shared")
    campaign = shared / "campaign.yaml"
    shutil.copy(her_campaign.file, campaign)  # the user's own file, but she may replace it
    _validate_and_run_refuse(
        campaign, project / "out", f"refusing the campaign file {campaign}", f"folder {shared}"
    )
    assert not her_campaign.marker.exists(), "her module was imported as the user"


def test_the_users_campaign_naming_her_folder_or_module_imports_nothing_of_hers(
    project: Path, other_user: OtherUser, her_campaign: HerCampaign
) -> None:
    """The campaign file is the user's own and safe; its ``python_path`` names her folder
    (``validate``, ``run`` and ``run_campaign`` refuse it before it goes on the path)."""
    from parsl_malleable.campaign.api import run_campaign

    mine = project / "mine"
    mine.mkdir(mode=0o755)
    campaign = mine / "campaign.yaml"
    campaign.write_text(her_campaign.file.read_text())
    _validate_and_run_refuse(
        campaign,
        project / "out",
        f"refusing the python_path folder {her_campaign.folder}",
        f"belongs to uid {other_user.uid}",
    )
    data = yaml.safe_load(campaign.read_text())
    with pytest.raises(UnsafePathError, match="refusing the python_path folder"):
        run_campaign(data, project / "out-api")
    with pytest.raises(UnsafePathError, match="refusing the campaign file"):
        run_campaign(her_campaign.file, project / "out-api")
    assert not her_campaign.marker.exists(), "her module was imported as the user"
    assert not (project / "out-api").exists()


def _finished_folder(output: Path) -> None:
    """An output folder whose run left job ``b`` failed, with a checkpoint."""
    from parsl_malleable.campaign.store import CampaignStore

    store = CampaignStore(output)
    store.sync_jobs([("b", {"app": "m:f"}, {})])
    store.begin_run("gone.yaml")
    store.finish("b", 1, error="ValueError: bug")
    store.close()
    (output / "checkpoints" / "b").mkdir(parents=True)
    (output / "checkpoints" / "b" / "step-4.pt").write_bytes(b"x")


def test_retry_from_scratch_deletes_nothing_through_a_checkpoints_link_she_planted(
    project: Path, other_user: OtherUser
) -> None:
    output = project / "out"
    _finished_folder(output)
    outside = project / "outside"
    (outside / "b").mkdir(parents=True)
    (outside / "b" / "keep").write_text("keep")
    os.chown(output, -1, other_user.gid)
    os.chmod(output, 0o770)  # the finished folder became group-writable
    planted = other_user.run(
        "import os, sys; os.rename(sys.argv[1], sys.argv[1] + '.old'); "
        "os.symlink(sys.argv[2], sys.argv[1]); print('planted')",
        str(output / "checkpoints"),
        str(outside),
    )
    assert planted.stdout.strip() == "planted", planted.stderr
    retry = ("retry", str(output), "b", "--from-scratch", "--no-run")
    _refused(_cli(*retry), f"refusing the output folder {output}", "mode is 0770")
    assert (outside / "b" / "keep").read_text() == "keep"
    os.chmod(output, 0o700)  # the user closes the folder; the link is still there
    _refused(_cli(*retry), f"refusing the checkpoints folder {output / 'checkpoints'}")
    assert (outside / "b" / "keep").read_text() == "keep"


def test_status_and_retry_answer_at_once_with_a_fifo_as_driver_lock(
    project: Path, other_user: OtherUser
) -> None:
    output = project / "out"
    _finished_folder(output)
    os.chown(output, -1, other_user.gid)
    os.chmod(output, 0o770)
    planted = other_user.run(
        "import os, sys; os.mkfifo(sys.argv[1], 0o666); print('planted')",
        str(output / "driver.lock"),
    )
    assert planted.stdout.strip() == "planted", planted.stderr
    for args in (("status", str(output)), ("retry", str(output), "--no-run")):
        _refused(_cli(*args, timeout_s=30), f"refusing the output folder {output}")
    assert stat.S_IMODE(output.stat().st_mode) == 0o770  # status changed nothing
    os.chmod(output, 0o700)
    for args in (("status", str(output)), ("retry", str(output), "--no-run")):
        _refused(_cli(*args, timeout_s=30), f"refusing the driver lock {output / 'driver.lock'}")
    assert stat.S_ISFIFO(os.lstat(output / "driver.lock").st_mode)


# ------------------------------------ a parent she can write; files written by folder, not path


def test_an_output_folder_under_a_parent_her_group_can_write_is_refused_before_anything_runs(
    project: Path, other_user: OtherUser
) -> None:
    """A 2770 project folder: she could rename the output folder mid-run and put her own in
    its place, where the next block's command would be written and swapped before bash ran it.
    The run is refused at once, in one line naming the parent and the fix, whether the output
    folder is new or one of the user's own (0700) from an earlier run."""
    shared = project / "shared"
    shared.mkdir()
    os.chown(shared, -1, other_user.gid)
    os.chmod(shared, 0o2770)
    campaign = campaign_file(project)
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    for output in (shared / "new", mine):
        done = subprocess.run(
            runs.command(campaign, output),
            env=runs.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        # The run's header ("campaign ... -> ...") and one error line.
        said = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
        assert len(said) == 1, done.stderr
        assert f"refusing the output folder {output}" in said[0], said
        assert f"the folder {shared} above it has mode 2770" in said[0], said
        assert f"chmod g-w,o-w {shared}" in said[0], said
        assert "Traceback" not in done.stderr
    # Nothing ran: no output folder made, nothing written into the user's own.
    assert sorted(p.name for p in shared.iterdir()) == ["mine"]
    assert list(mine.iterdir()) == []


SWAP = """
import os, sys
folder = sys.argv[1]
os.rename(folder, folder + ".old")
os.mkdir(folder, 0o777)
os.chmod(folder, 0o777)
os.symlink("/etc/passwd", os.path.join(folder, "s.command"))
print("swapped")
"""


def test_block_files_written_after_she_swapped_the_folder_land_in_the_users_folder(
    project: Path, other_user: OtherUser
) -> None:
    """The folder above the block folder became writable by her group after its check (the
    check refuses it when opened): she renames the block folder and puts her own, with a link
    under the command's name, in its place. The block's files still go into the folder the
    run checked and holds open (now under her new name), none into hers, nothing through her
    link, and no script path leading into her folder is handed on."""
    from parsl_malleable.harvest.block_script import write_block_files
    from parsl_malleable.private_files import PrivateFolder

    parent = project / "runinfo"
    parent.mkdir(mode=0o755)
    blocks = parent / "submit_scripts"
    with PrivateFolder(blocks, what="block script folder") as folder:
        os.chown(parent, -1, other_user.gid)
        os.chmod(parent, 0o2770)  # loosened after the check
        swapped = other_user.run(SWAP, str(blocks))
        assert swapped.stdout.strip() == "swapped", swapped.stderr
        with pytest.raises(UnsafePathError, match="no longer the folder that was checked"):
            write_block_files(
                folder,
                slot_id="s",
                block_id="1",
                command="echo mine",
                walltime_s=60,
                launcher="none",
            )
    renamed = parent / "submit_scripts.old"
    assert renamed.stat().st_uid == 0 and stat.S_IMODE(renamed.stat().st_mode) == 0o700
    assert (renamed / "s.command").read_text() == "echo mine\n"
    assert sorted(p.name for p in renamed.iterdir()) == ["s-60.sh", "s.command", "s.node"]
    assert [p.name for p in blocks.iterdir()] == ["s.command"]  # hers alone, still her link
    assert (blocks / "s.command").is_symlink()
    with pytest.raises(UnsafePathError, match="above it has mode 2770"):
        PrivateFolder(blocks)  # and a fresh check refuses the place
