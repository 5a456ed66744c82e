"""Steps/s of ``ctx.wrap`` (DDP) against hand-averaged gradients (``ctx.allreduce_gradients``).

Both paths run in the same job, on the same ranks, model and batches, in alternating rounds
(hand then DDP, DDP then hand, ...) so that a change in the machine's load hits both alike; the
figures are medians over the rounds. A step is
forward, backward, gradient exchange, optimizer step and ``state.commit()`` (with its
membership check), as in the examples. Models: the ~1M-parameter digits MLP of
``bench_rescale.py`` and the transformer LM of ``apps/lm.py``. Ranks are plain processes
(gloo on CPU, one intra-op thread each) around a coordinator in this process.

    python benchmarks/bench_ddp.py [--ranks 4] [--steps 20] [--rounds 6] [--model mlp|lm|both]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from parsl_malleable.elastic.coordinator import Coordinator  # noqa: E402
from parsl_malleable.elastic.rank import RankContext, RankSettings, RankSpec, run_rank  # noqa: E402
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost  # noqa: E402

MLP_HIDDEN = (1024, 896)


def _batches(model_name: str, batch_size: int, seed: int) -> tuple[Any, list[tuple[Any, ...]]]:
    """The model and 16 fixed batches of this rank (a loss function applies to each)."""
    gen = torch.Generator().manual_seed(seed)
    if model_name == "mlp":
        from apps.digits import load_data, make_model

        x, y, _, _ = load_data()
        model = make_model(MLP_HIDDEN, 0)
        picks = [torch.randint(len(x), (batch_size,), generator=gen) for _ in range(16)]
        return model, [(x[i], y[i]) for i in picks]
    from apps.lm import load_text
    from apps.lm import make_model as make_lm

    train, _, vocab = load_text(20_000, 0)
    model = make_lm(len(vocab), seed=0)
    picks = [torch.randint(len(train), (batch_size,), generator=gen) for _ in range(16)]
    return model, [(train[i],) for i in picks]


def _loss(model_name: str, model: Any, batch: tuple[Any, ...]) -> Any:
    if model_name == "mlp":
        x, y = batch
        return F.cross_entropy(model(x), y)
    from apps.lm import lm_loss

    return lm_loss(model, batch[0])


def bench_train(
    ctx: RankContext, model_name: str, steps: int, rounds: int, batch_size: int
) -> dict[str, list[float]]:
    """Time ``rounds`` x (``steps`` hand-averaged steps, ``steps`` DDP steps); steps/s each."""
    model, batches = _batches(model_name, batch_size, seed=int(ctx.member_id, 16) % 1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    ddp = ctx.wrap(model)
    state = ctx.state(model, optimizer)

    def loop(state: Any) -> dict[str, list[float]]:
        rates: dict[str, list[float]] = {"hand": [], "ddp": []}
        for round_ in range(rounds + 1):  # round 0 warms both paths up, untimed
            # Alternate which path goes first, so neither always follows the other.
            for path in ("hand", "ddp") if round_ % 2 else ("ddp", "hand"):
                ctx.allreduce_mean_([torch.zeros(1)])  # start together
                began = time.perf_counter()
                for step in range(steps if round_ else 5):
                    optimizer.zero_grad()
                    batch = batches[step % len(batches)]
                    if path == "ddp":
                        _loss(model_name, ddp, batch).backward()
                    else:
                        _loss(model_name, model, batch).backward()
                        ctx.allreduce_gradients(model)
                    optimizer.step()
                    state.commit()
                if round_:
                    rates[path].append(steps / (time.perf_counter() - began))
        return rates

    return ctx.run(loop, state)


def _rank(spec: RankSpec, args: tuple[Any, ...], queue: Any) -> None:
    outcome = run_rank(spec, bench_train, args, {})
    if outcome.rank == 0:
        queue.put(outcome.value)


def run(model_name: str, ranks: int, steps: int, rounds: int, batch_size: int) -> dict[str, Any]:
    """One job of ``ranks`` processes; rank 0's steps/s per path and round."""
    coordinator = Coordinator(TorchRendezvousHost(), min_nodes=ranks, max_nodes=ranks)
    coordinator.start()
    host, port = coordinator.address
    settings = RankSettings(collective_timeout_s=60, torch_threads=1)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = []
    for _ in range(ranks):
        spec = RankSpec(host, port, coordinator.token, settings)
        proc = ctx.Process(
            target=_rank, args=(spec, (model_name, steps, rounds, batch_size), queue)
        )
        proc.start()
        procs.append(proc)
    try:
        rates = queue.get(timeout=900)
    finally:
        for proc in procs:
            proc.join(60)
            if proc.is_alive():
                proc.kill()
        coordinator.close()
    params = sum(p.numel() for p in _batches(model_name, batch_size, 0)[0].parameters())
    return {"model": model_name, "params": params, **rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="steps per path and round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model", choices=["mlp", "lm", "both"], default="both")
    args = parser.parse_args()
    models = ["mlp", "lm"] if args.model == "both" else [args.model]
    print(f"{args.ranks} ranks, {args.steps} steps x {args.rounds} rounds per path, gloo on CPU")
    print(f"{'model':<5} {'params':>9} {'hand steps/s':>13} {'DDP steps/s':>12} {'DDP/hand':>9}")
    for name in models:
        res = run(name, args.ranks, args.steps, args.rounds, args.batch_size)
        hand, ddp = statistics.median(res["hand"]), statistics.median(res["ddp"])
        print(f"{name:<5} {res['params']:>9,} {hand:>13.1f} {ddp:>12.1f} {ddp / hand:>9.2f}")
        rounds = ", ".join(f"{h:.1f}/{d:.1f}" for h, d in zip(res["hand"], res["ddp"], strict=True))
        print(f"      rounds (hand/DDP): {rounds}")


if __name__ == "__main__":
    main()
