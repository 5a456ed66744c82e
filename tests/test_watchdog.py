"""The driver's watchdog: a killed driver takes what it listed with it (TERM, a grace, then KILL),
a clean exit leaves everything alone, and nothing but the driver's own pipe tells it what to do."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parsl_malleable.cli import isolate_driver
from parsl_malleable.watchdog import (
    SAFE_PATH_ENV,
    ProcessTree,
    ProcInfo,
    Watchdog,
    alive,
    process_start_time,
    watchdog_argv,
)

DRIVER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from parsl_malleable.watchdog import Watchdog
    mode = sys.argv[1]
    # A victim that notes a TERM and exits at once; one that ignores TERM; a process group.
    polite = subprocess.Popen([sys.executable, "-c",
        "import signal, sys, time\\n"
        "def bye(*_):\\n"
        "    open(sys.argv[1], 'w').write('term')\\n"
        "    sys.exit(0)\\n"
        "signal.signal(signal.SIGTERM, bye)\\n"
        "print('ready', flush=True)\\n"
        "time.sleep(300)\\n", sys.argv[2]], stdout=subprocess.PIPE, text=True)
    polite.stdout.readline()
    stubborn = subprocess.Popen([sys.executable, "-c",
        "import signal, time\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "print('ready', flush=True)\\n"
        "time.sleep(300)\\n"], stdout=subprocess.PIPE, text=True)
    stubborn.stdout.readline()
    group = subprocess.Popen(["sleep", "300"], start_new_session=True)
    watchdog = Watchdog(grace_s=float(sys.argv[3]))
    watchdog.start()
    watchdog.watch_process(polite.pid)
    watchdog.watch_process(stubborn.pid)
    watchdog.set_groups("local", [group.pid])
    # A line the watchdog must ignore: it is not a state.
    watchdog.proc.stdin.write(b'{"jobs": [[["rm", "-rf"], 7]]}\\nnot json\\n')
    watchdog.proc.stdin.flush()
    watchdog.watch_process(os.getpid() + 10**7)  # a state line after the junk, so it is read
    print(polite.pid, stubborn.pid, group.pid, watchdog.proc.pid, flush=True)
    if mode == "clean":
        watchdog.release()
        print("released", flush=True)
    time.sleep(300)
    """
)


def start_driver(
    tmp_path: Path, mode: str, grace_s: float = 3.0
) -> tuple[subprocess.Popen[str], list[int]]:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, mode, str(tmp_path / "termed"), str(grace_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    pids = [int(x) for x in driver.stdout.readline().split()]
    assert len(pids) == 4, driver.stderr.read() if driver.stderr else ""
    if mode == "clean":
        assert driver.stdout.readline().strip() == "released"
    return driver, pids


def wait_gone(pid: int, timeout_s: float = 30.0) -> bool:
    started = process_start_time(pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid, started):
            return True
        time.sleep(0.05)
    return False


def test_a_killed_driver_takes_what_it_listed_with_it_term_first(tmp_path: Path) -> None:
    driver, (polite, stubborn, group, watchdog) = start_driver(tmp_path, "kill", grace_s=3.0)
    try:
        assert alive(polite, None) and alive(stubborn, None) and alive(group, None)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        killed_at = time.monotonic()
        assert wait_gone(polite), "the listed process outlived its driver"
        assert wait_gone(group), "the listed process group outlived its driver"
        # TERM came first: the polite one had the time to note it (a rank finishes its save).
        assert (tmp_path / "termed").read_text() == "term"
        assert wait_gone(stubborn), "a process that ignores TERM was not killed after the grace"
        # ... and only after the grace: KILL is not sent before it is spent.
        assert time.monotonic() - killed_at >= 2.0
        assert wait_gone(watchdog), "the watchdog did not exit after cleaning up"
    finally:
        subprocess.run(["kill", "-9", str(polite), str(stubborn), str(group)], capture_output=True)


def test_a_clean_exit_releases_the_watchdog_without_killing(tmp_path: Path) -> None:
    driver, (polite, stubborn, group, watchdog) = start_driver(tmp_path, "clean")
    try:
        assert wait_gone(watchdog)
        driver.kill()
        driver.wait(10)
        # The watchdog left before the driver died, so nothing was there to stop the victims.
        assert alive(polite, None) and alive(stubborn, None) and alive(group, None)
        assert not (tmp_path / "termed").exists()
    finally:
        subprocess.run(["kill", "-9", str(polite), str(stubborn), str(group)], capture_output=True)


def test_the_watchdog_reads_no_file(tmp_path: Path) -> None:
    """What to clean up reaches the watchdog on its standard input only: its command line names
    no file, and it holds none open but its pipes (a file others could write could make it
    run a command as the user)."""
    driver, (polite, stubborn, group, watchdog) = start_driver(tmp_path, "kill")
    try:
        argv = Path(f"/proc/{watchdog}/cmdline").read_bytes().split(b"\0")
        assert not any(b"/" in arg for arg in argv[3:] if arg)

        # While its interpreter starts it reads system files (/etc/locale.alias, seen in CI):
        # once it runs, it holds nothing open but its pipes. A file it kept would never go.
        # /proc is read, for a moment, at each look at the driver's process tree.
        def held() -> list[str]:
            targets = []
            for fd in Path(f"/proc/{watchdog}/fd").iterdir():
                with contextlib.suppress(FileNotFoundError):  # closed since the listing
                    targets.append(str(fd.readlink()))
            kept = ("pipe:", "/dev/null", "socket:", "/proc/")
            return [t for t in targets if not t.startswith(kept) and t != "/proc"]

        deadline = time.monotonic() + 30
        while held() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not held(), held()
    finally:
        driver.kill()
        driver.wait(10)
        for pid in (polite, stubborn, group):
            wait_gone(pid)
        subprocess.run(["kill", "-9", str(polite), str(stubborn), str(group)], capture_output=True)


# ------------------------------------------------------------------ the driver's process tree

PARSL_DRIVER = textwrap.dedent(
    """
    import sys, threading
    from parsl_malleable.watchdog import driver_watchdog
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    class Stuck(HighThroughputExecutor):
        # Called by start() once the interchange runs, inside parsl.load: stay there, so the
        # kill lands where the interchange was not yet registered with the watchdog.
        def initialize_scaling(self):
            print("interchange", self.interchange_proc.pid, flush=True)
            threading.Event().wait()

    driver_watchdog()  # as the campaign runner: started before Parsl, told nothing more
    htex = Stuck(label="stuck", address="127.0.0.1", provider=LocalProvider(init_blocks=0))
    parsl.load(Config(executors=[htex], run_dir=sys.argv[1]))
    """
)


def test_a_driver_killed_inside_parsl_load_leaves_no_interchange(tmp_path: Path) -> None:
    """kill -9 while ``parsl.load`` runs, the interchange up and registered by nobody: the
    watchdog knows it from the driver's process tree and stops it (issue 49)."""
    driver = subprocess.Popen(
        [sys.executable, "-c", PARSL_DRIVER, str(tmp_path / "runinfo")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    interchange = None
    try:
        line = driver.stdout.readline().split()
        assert line and line[0] == "interchange", driver.stderr.read() if driver.stderr else ""
        interchange = int(line[1])
        assert alive(interchange, None)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        assert wait_gone(interchange, 60), "the interchange outlived its driver killed in load"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
        if interchange is not None:
            subprocess.run(["kill", "-9", str(interchange)], capture_output=True)


def _table(rows: dict[int, tuple[int, int, int, int]]) -> dict[int, ProcInfo]:
    """pid -> (parent, group, session, start tick), as :func:`process_table` gives it."""
    return {pid: ProcInfo(pp, pg, sid, str(tick)) for pid, (pp, pg, sid, tick) in rows.items()}


def test_the_tree_keeps_an_orphaned_descendant_and_drops_what_exited() -> None:
    tree = ProcessTree(100, "50", exclude=103)
    tree.root_session = 9
    # The driver 100 in session 9, its child 101 (the interchange), a grandchild 102 in a
    # group of its own, the watchdog 103 (its own session) with its cancel command 104, a
    # daemon 106 that left the session with its child 107; 200 is a stranger.
    table = _table(
        {100: (1, 100, 9, 50), 101: (100, 100, 9, 60), 102: (101, 102, 9, 70),
         103: (100, 103, 103, 55), 104: (103, 103, 103, 80), 106: (100, 106, 106, 65),
         107: (106, 106, 106, 66), 200: (1, 200, 200, 10)}
    )  # fmt: skip
    tree.poll(table)
    assert sorted(tree.known) == [101, 102]
    # 101 exits and 102 is handed to init: still ours. A pid reused by another process is not.
    del table[101]
    table[102] = ProcInfo(1, 102, 9, "70")
    table[105] = ProcInfo(1, 105, 9, "90")
    tree.poll(table)
    assert sorted(tree.known) == [102]
    table[102] = ProcInfo(1, 102, 9, "95")  # 102 exited, and its pid went to someone else
    tree.poll(table)
    assert tree.known == {}


def test_the_sweep_takes_the_dead_drivers_group_members_started_since_the_last_read() -> None:
    tree = ProcessTree(100, "50", exclude=103)
    tree.root_group, tree.root_session = 7, 7  # a shell's job, or a test's: not its own group
    tree.polled_ticks = 1000
    table = _table(
        {1: (0, 1, 1, 0), 5: (1, 7, 7, 10), 103: (1, 103, 103, 55), 300: (1, 7, 7, 1001),
         301: (300, 7, 7, 1002), 400: (1, 9, 9, 1003), 500: (5, 7, 7, 1004)}
    )  # fmt: skip
    tree.sweep_group(table)
    # 5 (the shell, older than the last read) and 400 (another group) are not the driver's, nor
    # 500, the shell's next command (its parent lives in the group); 300 started after the last
    # read in its group and was handed to init, and 301 under 300, are.
    assert sorted(tree.known) == [300, 301]


# ------------------------------------------------------------------------------------------------
# Nothing is imported from the driver's working folder (issue 49): it may be shared with other
# users, and ``python -m`` / ``python -c`` put it first on ``sys.path``.


def test_the_watchdog_runs_isolated_in_a_folder_of_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started from a folder holding a planted ``parsl_malleable``, the watchdog imports the
    installed one (``-P``), runs in ``/`` and passes the setting on to what it starts."""
    marker = tmp_path / "imported"
    planted = tmp_path / "shared" / "parsl_malleable"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(planted.parent)
    monkeypatch.delenv(SAFE_PATH_ENV, raising=False)
    argv = watchdog_argv(123, 2.5)
    assert argv[:4] == [sys.executable, "-P", "-m", "parsl_malleable.watchdog"]
    dog = Watchdog()
    dog.start()
    proc = dog.proc
    assert proc is not None
    try:
        assert Path(f"/proc/{proc.pid}/cwd").readlink() == Path("/")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert f"{SAFE_PATH_ENV}=1".encode() in environ
    finally:
        dog.release()
    assert proc.wait(timeout=10) == 0  # the planted package has no watchdog module
    assert not marker.exists()


def test_the_command_drops_its_working_folder_from_its_path_and_isolates_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m parsl_malleable`` started in ``tmp_path``: after the start, the folder is
    no longer on the command's path (its subcommands, Parsl and torch are imported later), and
    every process it starts gets ``PYTHONSAFEPATH``; the rest of the path stays."""
    monkeypatch.chdir(tmp_path)
    # Set, then removed: monkeypatch then removes what isolate_driver sets after the test.
    monkeypatch.setenv(SAFE_PATH_ENV, "")
    monkeypatch.delenv(SAFE_PATH_ENV)
    rest = [p for p in sys.path if p not in ("", str(tmp_path))]
    monkeypatch.setattr(sys, "path", [str(tmp_path), *rest])
    isolate_driver()
    assert sys.path == rest
    assert os.environ[SAFE_PATH_ENV] == "1"
    monkeypatch.setattr(sys, "path", ["", *rest])  # -c, or the interactive interpreter
    isolate_driver()
    assert sys.path == rest
    isolate_driver()  # the user's own first entry (a script's folder) is theirs
    assert sys.path == rest
