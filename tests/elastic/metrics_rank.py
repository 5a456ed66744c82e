"""One rank process of tests/elastic/test_metrics_survive.py.

Run as ``python metrics_rank.py HOST PORT TOKEN MEMBER CHECKPOINT_DIR TOTAL PACE_FILE``; prints
``outcome <json>`` on its last line. A tiny model trains ``TOTAL`` steps and the lead rank
reports every step before its commit: ``chain`` (a committed state field) and ``prev`` (its
value at the previous commit). Each time a group enters the loop it draws a new token (rank 0's
random number, shared by an all-reduce) that every step folds into the chain, so two timelines
never give one step the same chain: a stored report that is not from the committed timeline
breaks ``prev[s] == chain[s - 1]``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import torch

from parsl_malleable.elastic.rank import RankContext, RankSettings, RankSpec, run_rank

MODULUS = 2**31 - 1
PACE_S = 0.1


def train(ctx: RankContext, total: int, pace_file: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state = ctx.state(model, optimizer, chain=0.0)
    rng = random.Random()

    def loop(state: Any) -> dict[str, Any]:
        token = torch.zeros(1, dtype=torch.float64)
        if ctx.rank == 0:
            token[0] = rng.randrange(1, 1 << 20) * ctx.world_size
        ctx.allreduce_mean_([token])
        mixed = round(token.item())
        while state.step < total:
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            ctx.allreduce_gradients(model)
            optimizer.step()
            prev = state.chain
            state.chain = float((int(prev) * 31 + mixed) % MODULUS)
            ctx.report(state.step + 1, chain=state.chain, prev=prev, loss=loss.detach())
            if os.path.exists(pace_file):
                time.sleep(PACE_S)
            state.commit()
        return {"chain": state.chain, "step": state.step}

    return ctx.run(loop, state)


def main() -> None:
    host, port, token, member, directory, total, pace_file = sys.argv[1:8]
    settings = RankSettings(
        checkpoint_dir=directory,
        checkpoint_every=20,
        collective_timeout_s=15.0,
        heartbeat_interval_s=0.5,
        torch_threads=1,
    )
    spec = RankSpec(host, int(port), token, settings, member_id=member)
    outcome = run_rank(spec, train, (int(total), pace_file), {})
    print("outcome " + json.dumps({"status": outcome.status, "value": outcome.value}), flush=True)


if __name__ == "__main__":
    main()
