"""Rank processes (``tests/elastic/ddp_rank.py``) around a coordinator in the test process,
started, signalled and read by the test; no Parsl blocks, which keeps a run short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parsl_malleable.elastic.coordinator import Coordinator
from tests.stacks import stacks_of

RANK = Path(__file__).with_name("ddp_rank.py")
REPO = Path(__file__).resolve().parents[2]
TOKEN_VARIABLE = "DDP_RANK_TOKEN"


class Ranks:
    """Rank processes of one coordinator; ``settings``: their ``RankSettings`` fields."""

    def __init__(
        self,
        coordinator: Coordinator,
        args: dict[str, Any],
        settings: dict[str, Any],
        where: Callable[[int, list[str]], list[str]] | None = None,
    ) -> None:
        """``where(i, argv)``: the command that runs the i-th rank started (from 0) where it
        should run (for example ``srun -w nX argv`` on another host); default: here."""
        self.coordinator = coordinator
        self.args = args
        self.settings = settings
        self.where = where
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, count: int) -> list[str]:
        host, port = self.coordinator.address
        env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
        env["OMP_NUM_THREADS"] = "1"
        names = []
        for _ in range(count):
            name = uuid.uuid4().hex[:8]
            cmd = [sys.executable, str(RANK), host, str(port), name]
            cmd += [json.dumps(self.settings), json.dumps(self.args)]
            if self.where is not None:
                cmd = self.where(len(self.procs), cmd)
            # The job's token in the environment (private to this user), never on a command
            # line others can read.
            proc = subprocess.Popen(
                cmd,
                env={**env, TOKEN_VARIABLE: self.coordinator.token},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.procs[name] = proc
            names.append(name)
        return names

    def outcome(self, name: str, timeout_s: float = 120) -> dict[str, Any]:
        """The rank's ``outcome`` line (status and value), once it has exited."""
        proc = self.procs[name]
        out, err = proc.communicate(timeout=timeout_s)
        lines = [line for line in out.splitlines() if line.startswith("outcome ")]
        assert lines, f"rank {name} printed no outcome; stderr: {err[-3000:]}"
        return dict(json.loads(lines[-1].split(" ", 1)[1]))

    def outcome_or_stacks(
        self, name: str, pid: int, after_s: float, timeout_s: float
    ) -> tuple[dict[str, Any], str]:
        """The rank's outcome as :meth:`outcome`; if it has not exited ``after_s`` seconds on,
        the stacks of ``pid`` (the rank's own process) as it then stood, else ""."""
        proc = self.procs[name]
        try:
            proc.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            stacks = stacks_of(pid)  # now, before waiting on
            return self.outcome(name, timeout_s), stacks
        return self.outcome(name), ""

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
