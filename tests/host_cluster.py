"""The test cluster of real hosts (``scripts/host-cluster start``): Slurm nodes n1..n3, each in its
own network and UTS namespace with its own address and host name, on a bridge that holds the
driver's address. What a fault test needs: where the driver listens, how to run a process on a
host, and the faults a real network has (a host cut off and healed, a slow link).

The tests start it when none runs (root, Debian's Slurm); ``.ci/run`` starts it and sets
``PM_HOSTS_LIVE=1``: there, a cluster that does not answer fails the tests that need it.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "host-cluster"
COMMAND_TIMEOUT_S = 30.0
# A host cut off and healed answers Slurm's next ping (SlurmdTimeout / 3, 10 s) once resumed.
IN_SERVICE_TIMEOUT_S = 180.0
IN_SERVICE_POLL_S = 0.5


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    veth: str  # this machine's end of the host's only link
    namespace: str  # its network namespace (/run/netns/<namespace>)


@dataclass
class HostCluster:
    """A reachable cluster of namespaced hosts and the driver's address on their network."""

    env: dict[str, str]
    driver_address: str
    hosts: dict[str, Host]
    tag: str = field(default_factory=lambda: f"pmfault-{uuid.uuid4().hex[:8]}")

    def on(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on ``host`` as a one-node Slurm job (``srun``), named by this cluster's
        tag so that :meth:`cancel_all` ends it whatever happened to ``srun``."""
        conf = f"SLURM_CONF={self.env['SLURM_CONF']}"  # this cluster's, whatever the caller's
        srun = ["srun", "-N1", "-n1", "-w", host, "-p", "batch", f"--job-name={self.tag}"]
        return ["env", conf, *srun, *argv]

    def cut(self, host: str) -> None:
        """Cut ``host`` off the network (its link down): nothing reaches it, nothing leaves."""
        self._ip("link", "set", self.hosts[host].veth, "down")

    def heal(self, host: str) -> None:
        self._ip("link", "set", self.hosts[host].veth, "up")

    def slow(
        self, host: str, rate: str, latency: str | None = None, queue_bytes: int | None = None
    ) -> None:
        """Limit ``host``'s link to ``rate`` each way (tbf; this kernel has no netem for delay
        or random loss): packets queue up to ``latency`` (a slow, congested link), or up to
        ``queue_bytes``, past which they are dropped (a lossy one: TCP must resend)."""
        if (latency is None) == (queue_bytes is None):
            raise ValueError("give one of latency and queue_bytes")
        bound = ["latency", latency] if latency is not None else ["limit", str(queue_bytes)]
        for prefix, device in self._ends(host):
            subprocess.run(
                [*prefix, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", rate,
                 "burst", "16kbit", *bound],
                check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S,
            )  # fmt: skip

    def unslow(self, host: str) -> None:
        for prefix, device in self._ends(host):
            subprocess.run(
                [*prefix, "tc", "qdisc", "del", "dev", device, "root"],
                capture_output=True, timeout=COMMAND_TIMEOUT_S,
            )  # fmt: skip

    def _ends(self, host: str) -> list[tuple[list[str], str]]:
        """Both ends of ``host``'s link: this machine's veth, and eth0 inside the host."""
        inside = ["nsenter", f"--net=/run/netns/{self.hosts[host].namespace}"]
        return [([], self.hosts[host].veth), (inside, "eth0")]

    def job_processes_on(self, host: str) -> list[int]:
        """Processes of Slurm jobs (``SLURM_JOB_ID`` in their environment) still on ``host``."""
        inode = os.stat(f"/run/netns/{self.hosts[host].namespace}").st_ino
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if os.stat(proc / "ns" / "net").st_ino != inode:
                    continue
                if b"SLURM_JOB_ID=" in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue  # gone meanwhile
        return found

    def cancel_all(self) -> None:
        """End every job this cluster object started, and restore every link."""
        subprocess.run(["scancel", f"--name={self.tag}"], env=self.env, capture_output=True,
                       timeout=COMMAND_TIMEOUT_S)  # fmt: skip
        for name in self.hosts:
            self.heal(name)
            self.unslow(name)

    def node_states(self) -> dict[str, str]:
        """Each host's Slurm state as ``sinfo`` prints it (``idle``, ``down*``, ...)."""
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T", "-n", ",".join(self.hosts)], env=self.env,
            capture_output=True, text=True, check=True, timeout=COMMAND_TIMEOUT_S,
        ).stdout  # fmt: skip
        return dict(line.split() for line in out.splitlines() if line.strip())

    def wait_in_service(self, timeout_s: float = IN_SERVICE_TIMEOUT_S) -> None:
        """Every host idle in Slurm again, or RuntimeError naming the states.

        A test that cuts a host off leaves it ``down*`` (Slurm failed its job and hears nothing
        from it). Slurm stops pinging a node that is down and silent: healed, it came back only
        at a later registration request, 45-100 s on (the next test's rank there waited that
        long; this teardown did too). Resumed, it is ``idle*``, pinged again, and ``idle`` within
        a second once it answers. The caller heals every link first (:meth:`cancel_all`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.node_states()
            if all(state == "idle" for state in states.values()) and len(states) == len(self.hosts):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"hosts not back in service after {timeout_s:.0f} s: {states}")
            out = [name for name, state in states.items() if state.startswith(("down", "drain"))]
            if out:
                subprocess.run(
                    ["scontrol", "update", f"NodeName={','.join(out)}", "State=RESUME"],
                    env=self.env, capture_output=True, timeout=COMMAND_TIMEOUT_S,
                )  # fmt: skip
            time.sleep(IN_SERVICE_POLL_S)

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)


def _script(command: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    result = subprocess.run(
        [str(SCRIPT), command], capture_output=True, text=True, timeout=timeout_s
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/host-cluster {command}: {(result.stderr or result.stdout).strip()}"
        )
    return result.stdout


def read() -> HostCluster:
    """The running host cluster (RuntimeError when it does not answer)."""
    exported = dict(
        line.removeprefix("export ").split("=", 1) for line in _script("env").splitlines()
    )
    hosts = {}
    for line in _script("hosts").splitlines():
        name, address, veth, namespace = line.split()
        hosts[name] = Host(name, address, veth, namespace)
    env = {**os.environ, "SLURM_CONF": exported["SLURM_CONF"]}
    return HostCluster(env, exported["PM_SLURM_DRIVER_ADDRESS"], hosts)


def session() -> Iterator[HostCluster]:
    """The host cluster for a test session: started unless it runs already (and then stopped
    at the end, unless ``PM_SLURM_KEEP=1``). Where it cannot start (no root, no namespaces,
    no Slurm), the tests that need it are skipped saying why, or failed under
    ``PM_HOSTS_LIVE=1`` (``.ci/run``, which starts it)."""
    started_here = False
    try:
        if os.geteuid() != 0:
            raise RuntimeError("needs root (hosts are namespaces; links are cut with ip and tc)")
        try:
            _script("status")
        except RuntimeError:
            _script("start", timeout_s=180)
            started_here = True
        cluster = read()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        if os.environ.get("PM_HOSTS_LIVE") == "1":
            pytest.fail(f"the host cluster does not answer: {exc}")
        pytest.skip(f"no host cluster ({exc}); start one with: scripts/host-cluster start")
    try:
        yield cluster
    finally:
        if started_here and os.environ.get("PM_SLURM_KEEP") != "1":
            subprocess.run([str(SCRIPT), "stop"], capture_output=True, timeout=60)
