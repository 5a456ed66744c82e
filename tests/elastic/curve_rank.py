"""One rank process of tests/elastic/test_same_curve.py: the digits MLP in float64 with Adam,
``ctx.wrap`` (DDP) and a DataLoader over an ``ElasticDistributedSampler`` with micro-batches,
for a fixed number of steps; returns the loss of every global step.

Run as ``python curve_rank.py JOBS_JSON``: a list of jobs, each ``{"host", "port", "token",
"settings", "args"}`` and optionally ``"go"``, a file to wait for before registering (a rank
that joins a running group when the test chooses, with no start-up to wait for). The process
is a rank of each job in turn (one import of torch for all of them) and prints ``outcome I
<json>`` after job ``I``.

The loss of a step is the mean over the whole global batch (each rank's micro-batch losses,
weighted as their gradients are, summed over the group), kept in a committed field: a step
rolled back does not count, and a newcomer receives the curve so far with the rest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from apps.digits import load_data, make_model
from parsl_malleable.elastic.rank import RankContext, RankSettings, RankSpec, run_rank
from parsl_malleable.elastic.sampler import ElasticDistributedSampler


def train(
    ctx: RankContext,
    steps: int,
    batch_size: int,
    micro_batch: int | None,
    lr: float,
    seed: int = 0,
    pace_file: str = "",
    step_delay_s: float = 0.0,
) -> dict[str, Any]:
    x_tr, y_tr, _, _ = load_data()
    data = TensorDataset(x_tr.double(), y_tr)
    model = make_model((32,), seed).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    sampler = ElasticDistributedSampler(data, batch_size, seed=seed, micro_batch=micro_batch)
    loader = DataLoader(data, batch_sampler=sampler)
    ddp = ctx.wrap(model)
    losses = torch.zeros(steps, dtype=torch.float64)
    sizes = torch.zeros(steps, dtype=torch.int64)
    state = ctx.state(model, optimizer, sampler=sampler, losses=losses, sizes=sizes)

    def loop(state: Any) -> dict[str, Any]:
        total = 0.0
        while state.step < steps:
            for x, y in loader:
                if sampler.micro == 0:
                    optimizer.zero_grad()
                    total = 0.0
                with contextlib.nullcontext() if sampler.last_micro() else ddp.no_sync():
                    loss = F.cross_entropy(ddp(x), y) * sampler.loss_weight()
                    loss.backward()
                total += float(loss.detach())  # this rank's mean loss, once the step is done
                local, count = sampler.local_count(), sampler.global_count()
                if not sampler.advance():
                    continue
                step_loss = torch.tensor(
                    [total * local * ctx.world_size / count], dtype=torch.float64
                )
                ctx.allreduce_mean_([step_loss])
                optimizer.step()
                state.losses[state.step] = step_loss[0]
                state.sizes[state.step] = ctx.world_size
                if pace_file and os.path.exists(pace_file):
                    time.sleep(step_delay_s)
                state.commit()
                if state.step >= steps:
                    break
        return {
            "losses": state.losses.tolist(),
            "sizes": state.sizes.tolist(),
            "lr": optimizer.param_groups[0]["lr"],
        }

    return ctx.run(loop, state)


def main() -> None:
    logging.basicConfig(level=os.environ.get("DDP_RANK_LOG", "WARNING"))
    for index, job in enumerate(json.loads(sys.argv[1])):
        if job.get("go"):
            go = Path(job["go"])
            while not go.exists():  # the test's signal to join (see the module docstring)
                time.sleep(0.02)
        settings = RankSettings(**job["settings"])
        spec = RankSpec(job["host"], int(job["port"]), job["token"], settings)
        outcome = run_rank(spec, train, (), job["args"])
        value = {"status": outcome.status, "value": outcome.value}
        print("outcome", index, json.dumps(value), flush=True)


if __name__ == "__main__":
    main()
