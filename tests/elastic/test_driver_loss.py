"""The driver dies (SIGKILL) while a job trains: rank 0 saves the last commit before exiting, so
a rerun loses at most the step in flight (#13: it used to lose up to ``checkpoint_every - 1``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from parsl_malleable.elastic.checkpoint import CheckpointStore, model_fingerprint

# The driver's part: a coordinator (and the torch rendezvous store it hosts), nothing else.
_DRIVER = textwrap.dedent(
    """
    import time
    from parsl_malleable.elastic.coordinator import Coordinator
    from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
    coordinator = Coordinator(TorchRendezvousHost(), min_nodes=1, max_nodes=1, settle_s=0.0)
    coordinator.start()
    host, port = coordinator.address
    print(host, port, coordinator.token, flush=True)
    time.sleep(600)
    """
)

# One rank training a small model; a disk checkpoint only every 1,000 commits, so any checkpoint
# near the step it reached was written because the coordinator went away.
_RANK = textwrap.dedent(
    """
    import sys, time, torch
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
                print("step", state.step, flush=True)
                time.sleep(0.02)

        return ctx.run(loop, state)

    host, port, token, directory = sys.argv[1:5]
    settings = RankSettings(checkpoint_dir=directory, checkpoint_every=1000, check_every=5)
    outcome = run_rank(RankSpec(host, int(port), token, settings), train, (), {})
    print("outcome", outcome.status, flush=True)
    """
)


def test_rank_zero_saves_the_last_commit_when_the_driver_is_killed(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], stdout=subprocess.PIPE, text=True)
    rank = None
    try:
        host, port, token = driver.stdout.readline().split()
        rank = subprocess.Popen(
            [sys.executable, "-c", _RANK, host, port, token, str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        steps = []
        for line in rank.stdout:
            if line.startswith("step "):
                steps.append(int(line.split()[1]))
                if steps[-1] == 12:
                    break
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        rest, errors = rank.communicate(timeout=120)
    finally:
        driver.kill()
        if rank is not None:
            rank.kill()
    lines = rest.splitlines()
    steps += [int(line.split()[1]) for line in lines if line.startswith("step ")]
    assert lines[-1] == "outcome exited", (lines[-3:], errors[-2000:])
    assert "coordinator lost: saved the commit of step" in errors
    loaded = CheckpointStore(directory).load_latest(model_fingerprint(torch.nn.Linear(4, 1)))
    assert loaded is not None
    payload, step = loaded
    # Rank 0 finds the coordinator gone inside a commit (its membership check) and saves that
    # commit: the newest step trained, one past the last one the loop got to print.
    assert steps[-1] >= 12 and step in (steps[-1], steps[-1] + 1)
    assert payload["step"] == step
