"""A job grows from 1 to 2 ranks while 200 idle and 32 slow-drip connections are held against its
coordinator (#26), and the resize takes no more than without them (+1 s), writing few log lines.

Found by hand on the old front end: 32 slow-drip connections held every pre-authentication slot,
ranks were refused, a 2-rank job stopped training for the whole minute, and the driver's log got
47,504 lines. Here the same job grows twice from 1 to 2 ranks, once as usual and once under the
probe (:mod:`tests.elastic.hostile`). Ranks are real processes around a coordinator in the test
process, started together beforehand so that their imports are not in the figures; a resize is
timed from the newcomer's first connection attempt to the grown group's first commit.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from parsl_malleable.elastic import coordinator_server
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.transport.server import Limits
from tests.elastic.hostile import DRIP, IDLE, Probe

REPO = Path(__file__).resolve().parents[2]

# A rank that imports everything (and pays torch's first-use costs), says "imported", waits for
# a line on stdin, then prints the wall-clock time and starts (so the test decides when it
# connects), and trains until told to leave or exit.
_RANK = textwrap.dedent(
    """
    import sys, time, torch
    import parsl_malleable.elastic.torch_backend
    import parsl_malleable.elastic.warm  # torch's first-use imports, as an agent's warm-up does
    from parsl_malleable.elastic.rank import RankSettings, RankSpec, run_rank

    def train(ctx):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        state = ctx.state(model, optimizer)

        def loop(state):
            while True:
                loss = model(torch.randn(8, 4)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                ctx.allreduce_gradients(model)
                optimizer.step()
                state.commit()
                time.sleep(0.02)  # the pace of training, not a wait for anything

        return ctx.run(loop, state)

    host, port, token, member = sys.argv[1:5]
    settings = RankSettings(check_every=1, heartbeat_interval_s=0.5, collective_timeout_s=20.0)
    print("imported", flush=True)
    sys.stdin.readline()
    print("connecting", time.time(), flush=True)
    outcome = run_rank(RankSpec(host, int(port), token, settings, member_id=member), train, (), {})
    print("outcome", outcome.status, flush=True)
    """
)


class Rank:
    """One rank process, imported and waiting for :meth:`go`."""

    def __init__(self, coordinator: Coordinator) -> None:
        host, port = coordinator.address
        self.member = uuid.uuid4().hex[:8]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RANK, host, str(port), coordinator.token, self.member],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )

    def imported(self) -> None:
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "imported"

    def go(self) -> float:
        """Let it connect; the wall-clock time it began to."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        word, when = self.proc.stdout.readline().split()
        assert word == "connecting"
        return float(when)

    def outcome(self) -> str:
        out, _ = self.proc.communicate(timeout=60)
        return out.strip().splitlines()[-1]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def grown_with(coordinator: Coordinator, member: str, began: float) -> float:
    """Seconds from ``began`` to the first commit of a 2-rank epoch that has ``member``."""

    def resumed() -> float | None:
        numbers = {
            e["epoch"]
            for e in coordinator.epochs()
            if e["world_size"] == 2 and member in e["members"]
        }
        times = [
            e["time"]
            for e in coordinator.events()
            if e["event"] == "resumed" and e["epoch"] in numbers
        ]
        return min(times) if times else None

    assert coordinator.wait_for(lambda c: resumed() is not None, 90), coordinator.events()
    found = resumed()
    assert found is not None
    return found - began


# "fits": the default limits hold the whole probe, which the handshake deadline drops and the
# probe reopens; "exceeds": the old cap of 32 per address, so newcomers evict the oldest
# strangers all the time (several hundred a second) and the ranks' handshakes run through that.
LIMITS = {"fits": Limits(), "exceeds": Limits(pending_per_address=32)}


@pytest.fixture(params=sorted(LIMITS))
def job(request, monkeypatch) -> Iterator[tuple[Coordinator, list[Rank]]]:
    monkeypatch.setattr(coordinator_server, "LIMITS", LIMITS[request.param])
    coordinator = Coordinator(TorchRendezvousHost(), min_nodes=1, max_nodes=2, settle_s=0.0)
    coordinator.start()
    ranks = [Rank(coordinator) for _ in range(3)]
    try:
        yield coordinator, ranks
    finally:
        for rank in ranks:
            rank.kill()
        coordinator.close()


@pytest.mark.slow
def test_a_resize_under_idle_and_slow_drip_connections_takes_as_long_as_without(
    job, caplog
) -> None:
    coordinator, (first, usual, probed) = job
    for rank in (first, usual, probed):
        rank.imported()
    first.go()
    assert coordinator.wait_for(lambda c: c.resumed_at(1, min_step=3), 60), coordinator.events()

    usual_s = grown_with(coordinator, usual.member, usual.go())
    coordinator.drain(member_ids=[usual.member])
    assert usual.outcome() == "outcome left"
    assert coordinator.wait_for(lambda c: c.resumed_at(1), 60), coordinator.events()

    caplog.set_level(logging.DEBUG, logger="parsl_malleable")
    caplog.clear()
    server = coordinator._server
    assert server is not None
    with Probe(coordinator.address) as probe:
        # Every slot a stranger may hold is held, or as many as the probe has open.
        held = min(server.limits.pending_per_address, IDLE + DRIP) * 3 // 4
        assert coordinator.wait_for(lambda c: server.pending >= held, 30)
        pending_before = server.pending
        probed_s = grown_with(coordinator, probed.member, probed.go())
        lines = [r for r in caplog.records if r.name.startswith("parsl_malleable")]
    drops = dict(server.drops.totals)
    print(
        f"\nresize 1 -> 2: usual {usual_s:.2f} s, under the probe {probed_s:.2f} s; "
        f"{len(lines)} log lines; strangers pending as it came {pending_before}; "
        f"probe {probe.stats}; "
        f"server drops {drops}"
    )
    assert probed_s <= usual_s + 1.0, (usual_s, probed_s)
    assert len(lines) < 100, [r.getMessage() for r in lines[:20]]
    # The probe was really there: it held its connections and kept reopening what was dropped;
    # the drips were cut by the deadline when they fit, the oldest evicted when they did not.
    assert probe.stats["opened"] > IDLE + DRIP
    if server.limits.pending_per_address >= IDLE + DRIP:
        assert probe.stats["drip_bytes"] > 0 and drops.get("handshake deadline", 0) >= IDLE + DRIP
    else:
        assert drops.get("evicted", 0) > IDLE + DRIP
    coordinator.abort("test over")
    assert first.outcome() == "outcome exited"
    assert probed.outcome() == "outcome exited"
