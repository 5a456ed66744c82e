"""benchmarks/bench_fd_flood.py's parts, fast: its flooder is bounded and stops by itself, it
finds a process's listening ports, and its baseline really patches the driver's descriptor
budget out (every attribute the runner uses of the budget is there, as a no-op)."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_fd_flood", BENCHMARKS / "bench_fd_flood.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_flooder_opens_at_most_its_count_and_stops_when_the_driver_is_gone() -> None:
    bench = _bench()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(256)
        port = listener.getsockname()[1]
        assert port in bench.listening_ports(os.getpid())
        held, report = bench.flood([port], 40, 30, os.getpid())
        try:
            assert len(held) == report["made"] == report["tried"] == 40
            assert report["stopped"] == "count"
        finally:
            for conn in held:
                conn.close()
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait(30)
        held, report = bench.flood([port], 40, 30, gone.pid)
        assert held == [] and report["stopped"] == "driver exited"
    finally:
        listener.close()


def test_the_baseline_patches_out_every_part_of_the_budget_the_runner_uses() -> None:
    bench = _bench()
    runner = (REPO / "parsl_malleable" / "campaign" / "runner.py").read_text()
    used = set(re.findall(r"\b_?budget\.(\w+)", runner))
    assert {"start", "close", "explains", "tripped"} <= used
    check = (
        bench.BASELINE_PATCH
        + f"""
import resource, threading
from parsl import curvezmq
before = resource.getrlimit(resource.RLIMIT_NOFILE)
budget = runner.DescriptorBudget(lambda reason: None)
missing = [name for name in {sorted(used)!r} if not hasattr(budget, name)]
assert not missing, missing
budget.start()
assert resource.getrlimit(resource.RLIMIT_NOFILE) == before
assert "fd-budget" not in [t.name for t in threading.enumerate()]
assert not budget.tripped and not budget.explains(OSError(24, "Too many open files"))
socket_of = curvezmq.ClientContext.socket
with runner.shorten_zmq_handshakes(None):
    assert curvezmq.ClientContext.socket is socket_of
budget.close()
print("patched out")
"""
    )
    out = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "patched out"
    assert "budget is patched out" in out.stderr


def test_the_drivers_last_words_are_its_summary_and_its_reason() -> None:
    bench = _bench()
    said = bench.summary_line(
        "run 1: out of file descriptors; 0 done, 0 failed of 3\n"
        "  the driver ran out of file descriptors (...); it stopped\n"
        "  Parsl run directory /x\n  wrote /x/results.csv\n"
    )
    assert said == (
        "run 1: out of file descriptors; 0 done, 0 failed of 3 / "
        "the driver ran out of file descriptors (...); it stopped"
    )
    assert bench.summary_line("run 1: interrupted; 0 done, 0 failed of 3\n  wrote /x\n") == (
        "run 1: interrupted; 0 done, 0 failed of 3"
    )
    assert bench.summary_line("Traceback ...\nOSError: [Errno 24] Too many open files\n") == (
        "OSError: [Errno 24] Too many open files"
    )


def test_a_message_in_both_the_output_and_the_log_is_counted_once() -> None:
    bench = _bench()
    said = "WARNING x: poll 1: [Errno 24] Too many open files\nOSError: Too many open files\n"
    logged = (
        "2026-12-07 18:59:45,882 WARNING x: poll 1: [Errno 24] Too many open files\n"
        "2026-12-07 18:59:46,129 WARNING x: poll 2: [Errno 24] Too many open files\n"
        "2026-12-07 18:59:46,130 INFO x: no error\n"
    )
    assert bench.emfile_lines(said, logged) == 3
