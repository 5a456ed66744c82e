"""Secrets stay secret: a short real campaign on the emulated site, logging at DEBUG everywhere
(the driver, Parsl, the HTEX workers), whose secrets the test learns from the live driver; then
every file the run wrote (the output folder, Parsl's run directory, block scripts, logs, the
run's temporary, runtime and home folders, and new files in /tmp and /dev/shm) is searched for
each secret, raw and encoded. Only the key files whose job is to hold a key may contain it, and
they are 0600 in a 0700 folder; no file or folder the run wrote has group or other bits."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
import zmq.utils.z85

from tests.campaign import runs

pytestmark = pytest.mark.slow

LEARNED = "LEARNED-SECRETS "  # the driver's last stdout line (a pipe to this test, never a file)
CHECKPOINT_KEY = ".parsl-malleable-checkpoint.key"
MAX_SCAN_BYTES = 256 << 20

# The real `parsl-malleable run`, with a hook on the controller's state() (the runner calls it
# every sample) that learns the controller's secret and each job's coordinator token, DEBUG
# logging on stderr for every logger, and HTEX workers logging at DEBUG.
DRIVER = """
import json, logging, sys
from parsl_malleable import provider
from parsl_malleable.controller.live import Controller

learned = {}
state = Controller.state

def learning_state(self):
    learned["controller secret"] = self._secret
    for book in (self.jobs.running, self.jobs.ended):
        for name, job in book.items():
            learned[f"coordinator token of {name}"] = job.coordinator.token
            learned[f"derived token of {name}"] = self.job_token(name)
    return state(self)

Controller.state = learning_state
make_executor = provider.harvest_executor
provider.harvest_executor = lambda p, **kw: make_executor(p, worker_debug=True, **kw)
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
from parsl_malleable.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print("LEARNED-SECRETS " + json.dumps(learned), flush=True)
"""


def _campaign(tmp: Path) -> Path:
    """The demo at its smallest: two jobs of two epochs, a checkpoint every 20 steps."""
    path = runs.small_demo(tmp, step_delay_s=0.01)
    data = yaml.safe_load(path.read_text())
    data["sweeps"][0]["grid"] = {"lr": [0.05], "hidden": [[64]]}
    for entry in [data["sweeps"][0], *data["jobs"]]:
        entry["epochs"] = 2
        entry["checkpoint_every"] = 20
    data["time_limit_s"] = 600  # a bound on a failure only: the run ends when its jobs do
    path.write_text(yaml.safe_dump(data))
    return path


def _needles(secret: str) -> list[bytes]:
    """``secret`` as text and in the encodings it could be written in."""
    raw = secret.encode()
    forms = [raw, base64.b64encode(raw), raw.hex().encode()]
    try:
        binary = bytes.fromhex(secret)
    except ValueError:
        binary = zmq.utils.z85.decode(raw) if len(raw) % 5 == 0 else b""
    if binary:
        forms += [
            binary,
            binary.hex().encode(),
            base64.b64encode(binary),
            base64.urlsafe_b64encode(binary),
            base64.b64encode(binary).rstrip(b"="),
        ]
    return [form for form in forms if len(form) >= 16]


def _contains(data: bytes, needles: list[bytes]) -> bool:
    lowered = data.lower()
    return any(n in data or n.lower() in lowered for n in needles)


def _walk(root: Path) -> Iterator[Path]:
    """``root`` and everything under it, links not followed."""
    yield root
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            yield Path(folder, name)


def _new_in(folder: Path, since: float) -> list[Path]:
    """Entries of a shared folder (/tmp) made or changed since ``since``."""
    found = []
    for entry in folder.iterdir():
        try:
            if entry.lstat().st_mtime >= since:
                found.append(entry)
        except OSError:
            continue
    return found


def _cert_secrets(run_dirs: list[Path]) -> dict[str, tuple[str, Path]]:
    """The CurveZMQ secret keys of HTEX (Z85 text) and the files that hold them."""
    import zmq.auth

    keys = {}
    for cert_dir in run_dirs:
        for key_file in sorted(cert_dir.glob("*.key_secret")):
            _public, secret = zmq.auth.load_certificate(key_file)
            assert secret is not None, key_file
            keys[f"CurveZMQ secret key {key_file.name}"] = (secret.decode(), key_file)
    return keys


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A private TMPDIR with a short path: a worker pool's multiprocessing manager puts its
    socket under TMPDIR, and a socket path has at most 107 bytes; pytest's folder for this test
    is long enough (``pytest-136/popen-gw0/...``) that every block failed with "AF_UNIX path too
    long"."""
    folder = Path(tempfile.mkdtemp(prefix="pm-secrets-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_no_file_the_run_writes_holds_a_secret_or_is_open_to_others(tmp_path, short_tmp):
    campaign = _campaign(tmp_path)
    output = tmp_path / "out"
    private = {name: tmp_path / name for name in ("runtime", "home")}
    for folder in private.values():
        folder.mkdir(mode=0o700)
    private["tmp"] = short_tmp
    env = {
        **runs.env(),
        "TMPDIR": str(private["tmp"]),
        "XDG_RUNTIME_DIR": str(private["runtime"]),
        "HOME": str(private["home"]),
    }
    began = time.time()
    try:
        driver = subprocess.run(
            [sys.executable, "-c", DRIVER, "run", str(campaign), "-o", str(output), "--quiet"],
            env=env,
            capture_output=True,
            text=True,
            timeout=480,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as hung:
        log = hung.stderr.decode(errors="replace") if isinstance(hung.stderr, bytes) else ""
        pytest.fail(f"the run did not end in 480 s; the end of its DEBUG log:\n{log[-8000:]}")
    try:
        assert driver.returncode == 0, driver.stderr[-6000:]
        line = next(x for x in driver.stdout.splitlines() if x.startswith(LEARNED))
        learned: dict[str, str] = json.loads(line.removeprefix(LEARNED))
        jobs = sorted(runs.results(output).index)
        assert len(jobs) == 2
        assert {f"coordinator token of {job}" for job in jobs} <= set(learned), learned.keys()
        for job in jobs:
            assert learned[f"coordinator token of {job}"] == learned[f"derived token of {job}"]

        cert_dirs = sorted(output.rglob("certificates"))
        assert cert_dirs, "no CurveZMQ certificates folder under the output folder"
        secrets = {name: (value, None) for name, value in learned.items()}
        secrets |= _cert_secrets(cert_dirs)
        key_file = output / "checkpoints" / CHECKPOINT_KEY
        secrets["checkpoint master key"] = (key_file.read_text().strip(), key_file)
        assert sum(1 for name in secrets if name.startswith("CurveZMQ")) >= 2

        written = [
            *_walk(output),
            *(path for folder in private.values() for path in _walk(folder)),
        ]
        shared = [p for f in (Path("/tmp"), Path("/dev/shm")) for p in _new_in(f, began)]
        # Not this test's folders (nor the pytest folder above them): they are scanned above.
        shared = [p for p in shared if p != tmp_path and p not in tmp_path.parents]
        shared = [p for p in shared if tmp_path not in p.parents]
        leaks, loose = [], []
        ours = set(written)
        # The driver's own DEBUG log (stderr, a pipe here) and what it printed.
        printed = (driver.stdout.replace(line, "") + driver.stderr).encode()
        for name, (value, _holder) in secrets.items():
            if _contains(printed, _needles(value)):
                leaks.append(f"the driver's DEBUG log (stderr) shows the {name}")
        for path in written + [q for p in shared for q in _walk(p)]:
            try:
                info = path.lstat()
            except OSError:
                continue  # gone meanwhile (another process's temporary file)
            if path in ours and stat.S_IMODE(info.st_mode) & 0o077:
                loose.append(f"{path} {stat.S_IMODE(info.st_mode):04o}")
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SCAN_BYTES:
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for name, (value, holder) in secrets.items():
                if path != holder and _contains(data, _needles(value)):
                    leaks.append(f"{path} holds the {name}")
        assert not leaks, "\n".join(leaks)

        for name, (_value, holder) in secrets.items():
            if holder is not None:
                modes = (
                    stat.S_IMODE(holder.stat().st_mode),
                    stat.S_IMODE(holder.parent.stat().st_mode),
                )
                assert modes == (0o600, 0o700), (
                    f"{name} in {holder}: modes {modes[0]:04o}, folder {modes[1]:04o}"
                )
        # The results, pictures and matplotlib's caches are written by the command after the
        # runner's umask 077 was lifted: the command must keep it to its end.
        assert not loose, "written with group or other bits:\n" + "\n".join(loose)
    finally:
        runs.kill(runs.processes_of(output, 1))
