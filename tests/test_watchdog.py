"""The driver's watchdog: a killed driver takes what it listed with it (TERM, a grace, then KILL),
a clean exit leaves everything alone, and nothing but the driver's own pipe tells it what to do."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from parsl_malleable.watchdog import alive, process_start_time

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
        def held() -> list[str]:
            targets = [str(p.readlink()) for p in Path(f"/proc/{watchdog}/fd").iterdir()]
            return [t for t in targets if not t.startswith(("pipe:", "/dev/null", "socket:"))]

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
