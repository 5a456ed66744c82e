"""One rank process of the DDP tests (tests/elastic/rank_procs.py starts it): digits trained with
``ctx.wrap`` (DDP) and a ``DataLoader`` (one persistent worker process) over an
``ElasticDistributedSampler`` (a fixed global batch), optionally in fp16 with a GradScaler and
with micro-batches (gradient accumulation; ``apps.digits.train_ddp``'s loop).

Run as ``python ddp_rank.py HOST PORT MEMBER SETTINGS_JSON ARGS_JSON`` with the job's token in
$DDP_RANK_TOKEN; prints ``outcome <json>`` on its last line. Besides training, every step adds
the indices
this rank's DataLoader delivered (the padding excluded) to a per-epoch count in the state,
summed over the group: a committed field, rolled back and handed to newcomers with the rest, so
at the end it says how often each sample was trained in each epoch across every resize and
rollback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from apps.digits import accuracy, load_data, make_model, make_optimizer
from apps.precision import Precision
from parsl_malleable.elastic.rank import RankContext, RankSettings, RankSpec, run_rank
from parsl_malleable.elastic.sampler import ElasticDistributedSampler


class Indexed(Dataset):
    """``(x, y, index)`` triples, so the loop can tell which samples it trained on."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i], self.y[i], i


def train(
    ctx: RankContext,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    pace_file: str = "",
    step_delay_s: float = 0.0,
    precision: str = "fp32",
    micro_batch: int | None = None,
) -> dict[str, Any]:
    x_tr, y_tr, x_te, y_te = load_data()
    n = len(x_tr)
    model = make_model((128,), seed)
    optimizer, scheduler = make_optimizer(model, lr, epochs)
    sampler = ElasticDistributedSampler(n, batch_size, seed=seed, micro_batch=micro_batch)
    loader = DataLoader(
        Indexed(x_tr, y_tr), batch_sampler=sampler, num_workers=1, persistent_workers=True
    )
    ddp = ctx.wrap(model)
    amp = Precision(precision)
    seen = torch.zeros(epochs, n)
    state = ctx.state(model, optimizer, scheduler, sampler=sampler, scaler=amp.scaler, seen=seen)

    def loop(state: Any) -> dict[str, Any]:
        while sampler.epoch < epochs:
            for x, y, index in loader:
                if sampler.micro == 0:
                    optimizer.zero_grad()
                with contextlib.nullcontext() if sampler.last_micro() else ddp.no_sync():
                    with amp.autocast():
                        loss = F.cross_entropy(ddp(x), y) * sampler.loss_weight()
                    amp.backward(loss)
                counts = torch.zeros(n, dtype=torch.float64)
                counts[index[: sampler.local_micro_count()]] += 1
                ctx.allreduce_mean_([counts])
                state.seen[sampler.epoch] += torch.round(counts * ctx.world_size).float()
                epoch = sampler.epoch
                if not sampler.advance():
                    continue
                amp.step(optimizer)
                if sampler.epoch != epoch:
                    scheduler.step()
                if pace_file and os.path.exists(pace_file):
                    time.sleep(step_delay_s)
                state.commit()
        seen = state.seen
        scaler = amp.scaler.state_dict() if amp.scaler is not None else None
        return {
            "scaler": scaler,
            "test_accuracy": accuracy(model, x_te, y_te),
            "steps": state.step,
            "seen_min": seen.min(dim=1).values.tolist(),
            "seen_max": seen.max(dim=1).values.tolist(),
        }

    return ctx.run(loop, state)


def main() -> None:
    # DDP_RANK_LOG=INFO shows the runtime's rollbacks ("gradient exchange failed ...").
    logging.basicConfig(level=os.environ.get("DDP_RANK_LOG", "WARNING"))
    host, port, member = sys.argv[1:4]
    token = os.environ.pop("DDP_RANK_TOKEN")
    settings = RankSettings(**json.loads(sys.argv[4]))
    kwargs = json.loads(sys.argv[5])
    spec = RankSpec(host, int(port), token, settings, member_id=member)
    outcome = run_rank(spec, train, (), kwargs)
    print("outcome", json.dumps({"status": outcome.status, "value": outcome.value}), flush=True)


if __name__ == "__main__":
    main()
