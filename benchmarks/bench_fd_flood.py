"""A flood of connections to the driver's Parsl ports (issue 49): the driver with its descriptor
budget against the same driver with the budget patched out, in the same run.

    python benchmarks/bench_fd_flood.py [--connections 21000] [--limit N] [--modes budget,baseline]
        [--observe-s 60] [--connect nonblocking|blocking] [--keep DIR]

Parsl's HighThroughputExecutor binds three ZMQ sockets in the driver (127.0.0.1, ports
55000-56000), which any local user can reach; libzmq accepts every connection and holds a
descriptor for it until its handshake completes or times out. Per mode, the small demo of the
campaign tests (``tests/campaign/runs.py``: two sweep points and the deep job on the emulated
site, here ``--epochs`` 30 at ``--step-delay`` 0.2 s a step) runs as the real command (``python -m
parsl_malleable run <campaign> -o <out> --quiet``) with a descriptor limit of ``--limit`` (soft
= hard; default: this machine's hard limit, ``ulimit -Hn``). Once it listens on its three Parsl
ports and a job has trained a step, two flooding processes open ``--connections`` TCP
connections to those ports in turn (to 127.0.0.1 only; each loop is bounded in count and in
``--flood-s`` seconds and stops by itself, or when the driver exits; each flooder raises its own
``RLIMIT_NOFILE`` to what it holds; connects are non-blocking, up to :data:`IN_FLIGHT` under way
per flooder, or with ``--connect blocking`` one at a time, each waiting for its handshake) and
hold them open while the driver runs on for ``--observe-s`` seconds; then the flood is closed
and a driver still running is stopped as Ctrl-C would (SIGTERM). The driver's open descriptors
(``/proc/<pid>/fd``) are counted every 0.1 s from its ports' opening to its end.

Modes: ``budget`` is the driver as shipped (``campaign/fd_budget.py``: soft limit raised to the
hard one, 2 s ZMQ handshakes on its Parsl sockets, a watched margin and a reserve).
``baseline`` is the same driver with its budget patched out, started through a ``python -c``
wrapper (:data:`BASELINE_WRAPPER`) that replaces ``DescriptorBudget`` and
``shorten_zmq_handshakes`` in ``campaign/runner.py`` with no-ops (no thread, no reserve, libzmq's
30 s handshakes) before calling the command's ``main``: in this respect, the driver before
the budget came (45c3fff, #49).

Printed per mode: connections made (of those tried) and in how many seconds; the driver's
descriptors at the peak, of its limit, and when the observation ended; lines of the driver's
output or ``campaign.log`` that say "Too many open files" (once if in both), and tracebacks in
its output; the steps its jobs trained from the flood's start to the observation's end; how the
driver ended (still running, then stopped by SIGTERM; or by itself) with its exit status, what
it said at its end (its ``run 1: ...`` line and the reason it stopped, or else its last line)
and the run's outcome in its state; ``PRAGMA integrity_check`` of ``state.sqlite``. ``--keep
DIR`` keeps each run's folder (campaign, output, the driver's log) under ``DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARSL_PORTS = range(55000, 56001)  # HighThroughputExecutor's interchange_port_range
FLOODERS = 2
SAMPLE_S = 0.1
CONNECT_TIMEOUT_S = 2.0  # one connect; a full backlog makes the kernel retry the handshake
IN_FLIGHT = 500  # connects under way at once, per flooder
MODES = ("budget", "baseline")

# The driver with its descriptor budget patched out (the baseline): the budget becomes a no-op
# (no limit raised, no reserve, no watching thread, no error explained by it) and Parsl's ZMQ
# sockets keep libzmq's default handshake limit (30 s). Then the command's own main.
BASELINE_PATCH = """
import contextlib, sys
from parsl_malleable.campaign import runner

class NoBudget:
    tripped = False
    reason = None
    def __init__(self, on_exhausted, **options): pass
    def start(self): pass
    def close(self): pass
    def release_reserve(self): pass
    def near_limit(self): return False
    def explains(self, exc): return False

runner.DescriptorBudget = NoBudget
runner.shorten_zmq_handshakes = lambda executor, ivl_ms=0: contextlib.nullcontext()
print("bench_fd_flood: the driver's descriptor budget is patched out", file=sys.stderr, flush=True)
"""
BASELINE_WRAPPER = BASELINE_PATCH + "from parsl_malleable.cli import main\nmain()\n"


def _load(relative: str) -> ModuleType:
    """A helper module of the test suite, by path (``tests`` is also another distribution's
    package name, which an import by name could find)."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ the flooder


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def raise_own_limit(needed: int) -> int:
    """Raise this process's ``RLIMIT_NOFILE`` so that it can hold ``needed`` descriptors (the
    hard limit too, where allowed: root); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return soft
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return needed
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
        return needed
    except (OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard


def flood(
    ports: list[int], count: int, seconds: float, driver_pid: int, offset: int = 0
) -> tuple[list[socket.socket], dict[str, Any]]:
    """Open up to ``count`` connections to ``ports`` on 127.0.0.1 in turn (starting at port
    ``offset``), holding them, for at most ``seconds`` or until the driver has exited or this
    process runs out of descriptors; the connections and what happened. Connects are
    non-blocking, up to :data:`IN_FLIGHT` at once (a flood does not wait for each handshake);
    one not made within :data:`CONNECT_TIMEOUT_S` (refused, or its SYN dropped by a full
    backlog and not answered in time) counts as failed."""
    limit = raise_own_limit(count + IN_FLIGHT + 64)
    count = min(count, limit - IN_FLIGHT - 64)
    held: list[socket.socket] = []
    pending: dict[int, tuple[socket.socket, float]] = {}  # by descriptor, oldest first
    poller = select.poll()
    failed = attempted = 0
    stopped = "count"
    started = checked = time.monotonic()
    if not alive(driver_pid):
        count, stopped = 0, "driver exited"
    while attempted < count or pending:
        now = time.monotonic()
        if now - started > seconds:
            stopped = "time"
            break
        if now - checked > 0.1:
            checked = now
            if not alive(driver_pid):
                stopped = "driver exited"
                break
        while attempted < count and len(pending) < IN_FLIGHT:
            try:
                conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            except OSError:
                count, stopped = attempted, "own descriptors"
                break
            conn.setblocking(False)
            code = conn.connect_ex(("127.0.0.1", ports[(attempted + offset) % len(ports)]))
            attempted += 1
            if code == 0:
                held.append(conn)
            elif code == errno.EINPROGRESS:
                pending[conn.fileno()] = (conn, now)
                poller.register(conn, select.POLLOUT)
            else:
                conn.close()
                failed += 1
        for fd, _ in poller.poll(20):
            conn, _ = pending.pop(fd)
            poller.unregister(fd)
            if conn.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                held.append(conn)
            else:
                conn.close()
                failed += 1
        while pending:  # the oldest first: give up on those past the timeout
            fd, (conn, since) = next(iter(pending.items()))
            if now - since < CONNECT_TIMEOUT_S:
                break
            del pending[fd]
            poller.unregister(fd)
            conn.close()
            failed += 1
    for conn, _ in pending.values():  # stopped early: what was under way is not made
        conn.close()
        failed += 1
    return held, {
        "made": len(held),
        "tried": len(held) + failed,
        "seconds": time.monotonic() - started,
        "stopped": stopped,
    }


def flood_blocking(
    ports: list[int], count: int, seconds: float, driver_pid: int, offset: int = 0
) -> tuple[list[socket.socket], dict[str, Any]]:
    """:func:`flood` one connect at a time, each waiting for its handshake (up to
    :data:`CONNECT_TIMEOUT_S`): a flood that slows down as the driver's accepts do."""
    limit = raise_own_limit(count + 64)
    count = min(count, limit - 64)
    held: list[socket.socket] = []
    failed = 0
    stopped = "count"
    started = time.monotonic()
    for i in range(count):
        if time.monotonic() - started > seconds:
            stopped = "time"
            break
        if i % 100 == 0 and not alive(driver_pid):
            stopped = "driver exited"
            break
        try:
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            stopped = "own descriptors"
            break
        conn.settimeout(CONNECT_TIMEOUT_S)
        try:
            conn.connect(("127.0.0.1", ports[(i + offset) % len(ports)]))
        except OSError:  # refused (the listener closed) or timed out (backlog full)
            conn.close()
            failed += 1
            continue
        held.append(conn)
    return held, {
        "made": len(held),
        "tried": len(held) + failed,
        "seconds": time.monotonic() - started,
        "stopped": stopped,
    }


def flooder_main(args: argparse.Namespace) -> None:
    """A flooding process: flood, print what happened (one JSON line), hold the connections
    until stdin closes or ``--hold-s`` has passed, close them."""
    ports = [int(port) for port in args.flooder.split(",")]
    how = flood_blocking if args.connect == "blocking" else flood
    held, report = how(ports, args.connections, args.flood_s, args.driver_pid, args.offset)
    print(json.dumps(report), flush=True)
    with contextlib.suppress(OSError):
        select.select([sys.stdin], [], [], args.hold_s)
    for conn in held:
        conn.close()


# ------------------------------------------------------------------------------ the driver


def listening_ports(pid: int) -> set[int]:
    """The TCP ports that process ``pid`` listens on at 127.0.0.1 (from /proc)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = str(fd.readlink())
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                address, port = fields[1].split(":")
                loopback = address in ("0100007F", "0000000000000000FFFF00000100007F")
                if fields[3] == "0A" and fields[9] in inodes and loopback:  # 0A: LISTEN
                    ports.add(int(port, 16))
    return ports


def open_descriptors(pid: int) -> int | None:
    """How many descriptors process ``pid`` has open; None once it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class Sampler:
    """Count a process's open descriptors every :data:`SAMPLE_S` in a thread; keep the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.last = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fd-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            count = open_descriptors(self.pid)
            if count is None:
                return
            self.last = count
            self.peak = max(self.peak, count)
            self._done.wait(SAMPLE_S)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)


def wait_until(check: Any, limit_s: float, what: str, driver: subprocess.Popen[bytes]) -> Any:
    """Poll ``check`` until it gives something true; fail after ``limit_s`` or if the driver
    exits first."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if driver.poll() is not None:
            raise RuntimeError(f"the driver exited ({driver.returncode}) before {what}")
        time.sleep(0.2)
    raise RuntimeError(f"no {what} within {limit_s:.0f} s")


def steps_trained(runs: ModuleType, output: Path) -> int:
    """The steps the campaign's jobs have reached, summed over its jobs (from its samples)."""
    rows = runs.query(
        output, "SELECT SUM(s) FROM (SELECT MAX(step) AS s FROM job_samples GROUP BY job)"
    )
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def integrity(output: Path) -> str:
    path = output / "state.sqlite"
    if not path.exists():
        return "no state.sqlite"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            return str(db.execute("PRAGMA integrity_check").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"


def emfile_lines(output: str, logged: str) -> int:
    """Lines that say "Too many open files" in the driver's output or its ``campaign.log``; a
    message in both (the log's line has a date and time before it) is counted once."""
    said = Counter(line.strip() for line in output.splitlines() if "Too many open files" in line)
    in_log = Counter(
        line.split(" ", 2)[-1].strip()
        for line in logged.splitlines()
        if "Too many open files" in line
    )
    return sum((said | in_log).values())


def summary_line(text: str) -> str:
    """What the driver said at its end: its ``run N: <outcome>; ...`` line and the reason it
    stopped, when it gave one; else its last line (an error's)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("run ") and ": " in line and " done, " in line:
            after = lines[i + 1] if i + 1 < len(lines) else ""
            reason = "" if after.startswith(("Parsl run directory", "wrote ")) else after
            return f"{line} / {reason}" if reason else line
    return lines[-1] if lines else ""


@dataclass
class Result:
    mode: str
    limit: int
    tried: int = 0
    made: int = 0
    flood_s: float = 0.0
    stopped: list[str] = field(default_factory=list)
    peak: int = 0
    at_end: int | None = None
    emfile_lines: int = 0
    tracebacks: int = 0
    steps: int = 0
    survived: bool = False
    returncode: int | None = None
    last_line: str = ""
    outcome: str = ""
    integrity: str = ""


def start_flooders(
    script: Path, ports: list[int], args: argparse.Namespace, driver_pid: int
) -> list[subprocess.Popen[str]]:
    share = [
        args.connections // FLOODERS + (k < args.connections % FLOODERS) for k in range(FLOODERS)
    ]
    hold_s = args.flood_s + args.observe_s + 120  # a bound: the flooders are told to end first
    return [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                "--flooder",
                ",".join(map(str, ports)),
                "--connections",
                str(share[k]),
                "--flood-s",
                str(args.flood_s),
                "--driver-pid",
                str(driver_pid),
                "--offset",
                str(k),
                "--hold-s",
                str(hold_s),
                "--connect",
                args.connect,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(FLOODERS)
    ]


def flooder_reports(flooders: list[subprocess.Popen[str]], limit_s: float) -> list[dict[str, Any]]:
    reports = []
    deadline = time.monotonic() + limit_s
    for flooder in flooders:
        assert flooder.stdout is not None
        ready, _, _ = select.select([flooder.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = flooder.stdout.readline() if ready else ""
        reports.append(json.loads(line) if line else {"made": 0, "tried": 0, "seconds": 0.0})
    return reports


def run_mode(mode: str, args: argparse.Namespace, runs: ModuleType, folder: Path) -> Result:
    """One flooded run of the small demo; what it did."""
    folder.mkdir()
    campaign = runs.small_demo(folder, step_delay_s=args.step_delay)
    import yaml  # here: a flooder imports only the standard library

    data = yaml.safe_load(campaign.read_text())
    for entry in [*data.get("sweeps", []), *data.get("jobs", [])]:
        entry["epochs"] = args.epochs  # long enough to train on past the observation
    campaign.write_text(yaml.safe_dump(data))
    output = folder / "out"
    argv = runs.command(campaign, output)
    if mode == "baseline":  # python -c BASELINE_WRAPPER run <campaign> -o <out> --quiet
        argv = [argv[0], "-c", BASELINE_WRAPPER, *argv[3:]]
    limit = args.limit

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    result = Result(mode=mode, limit=limit)
    log = folder / "driver.log"
    with log.open("w") as sink:
        driver = subprocess.Popen(
            argv,
            env=runs.env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=limit_descriptors,
        )
    flooders: list[subprocess.Popen[str]] = []
    sampler: Sampler | None = None
    try:
        ports = wait_until(
            lambda: sorted(p for p in listening_ports(driver.pid) if p in PARSL_PORTS),
            300,
            "Parsl ports",
            driver,
        )
        sampler = Sampler(driver.pid)
        wait_until(lambda: steps_trained(runs, output) > 0, 300, "first step", driver)
        before = steps_trained(runs, output)
        flooders = start_flooders(Path(__file__).resolve(), ports, args, driver.pid)
        reports = flooder_reports(flooders, args.flood_s + 60)
        result.made = sum(r["made"] for r in reports)
        result.tried = sum(r["tried"] for r in reports)
        result.flood_s = max(r["seconds"] for r in reports)
        result.stopped = sorted({r.get("stopped", "no report") for r in reports})
        # The driver runs on, the flood held open, for a bounded time.
        deadline = time.monotonic() + args.observe_s
        while time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
        result.steps = steps_trained(runs, output) - before
        result.at_end = open_descriptors(driver.pid) if driver.poll() is None else None
        for flooder in flooders:  # the flood ends: its connections close
            assert flooder.stdin is not None
            flooder.stdin.close()
        result.survived = driver.poll() is None
        if result.survived:
            driver.send_signal(signal.SIGTERM)  # as Ctrl-C would
        try:
            driver.wait(args.stop_s)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait(30)
        result.returncode = driver.returncode
    finally:
        if sampler is not None:
            sampler.stop()
            result.peak = sampler.peak
        for flooder in flooders:
            with contextlib.suppress(OSError):
                if flooder.stdin is not None:
                    flooder.stdin.close()
            try:
                flooder.wait(30)
            except subprocess.TimeoutExpired:
                flooder.kill()
                flooder.wait(30)
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
        runs.kill(runs.processes_of(output, 1))  # what the driver left (the baseline may)
    text = log.read_text(errors="replace")
    campaign_log = output / "campaign.log"
    logged = campaign_log.read_text(errors="replace") if campaign_log.exists() else ""
    result.emfile_lines = emfile_lines(text, logged)
    result.tracebacks = text.count("Traceback")
    result.last_line = summary_line(text)
    outcome = runs.query(output, "SELECT value FROM meta WHERE key = 'run1_outcome'")
    result.outcome = outcome[0][0] if outcome else "(none recorded)"
    result.integrity = integrity(output)
    return result


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    names = {"budget": "now (budget)", "baseline": "baseline (no budget)"}

    def cells(r: Result) -> dict[str, str]:
        if r.survived:
            ended = f"still running after {args.observe_s:.0f} s; SIGTERM: rc {r.returncode}"
        else:
            ended = f"ended by itself: rc {r.returncode}"
        return {
            "the flood": f"{r.made:,} made of {r.tried:,} tried in {r.flood_s:.1f} s",
            "flooders stopped by": ", ".join(r.stopped),
            "driver's descriptors, peak": f"{r.peak:,} of {r.limit:,}",
            "... at the observation's end": (
                f"{r.at_end:,} of {r.limit:,}" if r.at_end is not None else "(exited)"
            ),
            '"Too many open files" lines': f"{r.emfile_lines:,}",
            "tracebacks in its output": f"{r.tracebacks}",
            "steps trained from the flood on": f"{r.steps}",
            "the driver": ended,
            "its last line": r.last_line,
            "run outcome": r.outcome,
            "state.sqlite integrity_check": r.integrity,
        }

    table = [cells(r) for r in results]
    width = max(len(key) for key in table[0])
    column = max(
        *(len(names[r.mode]) for r in results),
        *(len(value) for row in table for key, value in row.items() if key != "its last line"),
    )
    print(
        f"small demo at {args.step_delay} s a step, {args.epochs} epochs; {args.connections:,} "
        f"{args.connect} connects from {FLOODERS} flooders to the driver's 3 Parsl ports on "
        f"127.0.0.1; driver's limit "
        f"{args.limit:,}; observed {args.observe_s:.0f} s after the flood; "
        f"{os.cpu_count()} cores"
    )
    print(f"{'':{width}s}  " + "  ".join(f"{names[r.mode]:{column}s}" for r in results))
    for key in table[0]:
        if key == "its last line":
            continue
        print(f"{key:{width}s}  " + "  ".join(f"{row[key]:{column}s}" for row in table))
    for r, row in zip(results, table, strict=True):
        print(f"{names[r.mode]}, the driver said at its end: {row['its last line']}")


def main(argv: list[str] | None = None) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    default_limit = 20000 if hard == resource.RLIM_INFINITY else hard
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=21000, help="the flood's bound")
    parser.add_argument(
        "--limit", type=int, default=default_limit, help="the driver's descriptor limit"
    )
    parser.add_argument("--modes", default=",".join(MODES), help="budget, baseline or both")
    parser.add_argument("--flood-s", type=float, default=60.0, help="bound on each flooder")
    parser.add_argument("--observe-s", type=float, default=60.0, help="after the flood")
    parser.add_argument("--stop-s", type=float, default=180.0, help="SIGTERM to SIGKILL")
    parser.add_argument("--step-delay", type=float, default=0.2, help="seconds a step")
    parser.add_argument("--epochs", type=int, default=30, help="of each job")
    parser.add_argument(
        "--connect",
        choices=("nonblocking", "blocking"),
        default="nonblocking",
        help="the flooders' connects: many under way at once, or one at a time",
    )
    parser.add_argument("--keep", type=Path, help="keep each run's folder under this one")
    # A flooding process (this script, started by itself).
    parser.add_argument("--flooder", help=argparse.SUPPRESS)
    parser.add_argument("--driver-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hold-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flooder:
        flooder_main(args)
        return
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown or not modes:
        parser.error(f"--modes: {sorted(unknown)} not in {MODES}")
    runs = _load("tests/campaign/runs.py")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-fd-flood-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for mode in modes:
            results.append(run_mode(mode, args, runs, folder / mode))
            print(f"{mode}: done ({folder / mode})", file=sys.stderr, flush=True)
    print_table(results, args)


if __name__ == "__main__":
    main()
