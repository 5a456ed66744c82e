"""One trial of the submitit-style baseline (``bench_live_site.py``): the digits MLP of
``apps/digits.py`` trained in one process on one node of a preemptable partition, the way a
user's requeued job runs there.

It resumes from its checkpoint if one is there, checkpoints every ``--checkpoint-every`` steps
and when Slurm's preemption notice (SIGTERM) arrives (then it leaves after the step in
progress: the partition's GraceTime is the time it has), and writes ``NAME.done`` (test
accuracy, steps) when its epochs are done. Each run of it writes ``NAME.seg-JOBID.json``: when
the process started, when its imports and data were ready, its first and last step and how many
steps it trained, rewritten at every checkpoint (a SIGKILL loses only what came after the last
one, as it loses those steps).

Same model, optimiser, data order, batch (32) and paced step (``--step-s`` per step, as
``train_elastic``'s ``step_delay_s`` on one rank) as the malleable jobs it is compared with.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: the interpreter's start-up is part of a cold start

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from parsl_malleable.apps.digits import (  # noqa: E402
    accuracy,
    load_data,
    make_model,
    make_optimizer,
)

from parsl_malleable.elastic.state import ElasticSampler  # noqa: E402

BATCH = 32


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--hidden", type=int, nargs="+", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--checkpoint-every", type=int, default=200)
    args = parser.parse_args()

    notice = []
    signal.signal(signal.SIGTERM, lambda *_: notice.append(time.time()))

    x_tr, y_tr, x_te, y_te = load_data()
    model = make_model(tuple(args.hidden), args.seed)
    optimizer, scheduler = make_optimizer(model, 0.02, args.epochs)
    sampler = ElasticSampler(len(x_tr), BATCH, seed=args.seed)
    step = 0
    checkpoint = args.dir / f"{args.name}.pt"
    if checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        sampler.epoch, sampler.position = int(saved["epoch"]), int(saved["position"])
        step = int(saved["step"])
    segment = {
        "job": os.environ.get("SLURM_JOB_ID", str(os.getpid())),
        "started": STARTED,
        "ready": time.time(),
        "start_step": step,
        "first_step": None,
        "last_step_at": None,
        "step": step,
        "notice": None,
    }
    seg_file = args.dir / f"{args.name}.seg-{segment['job']}.json"

    def save() -> None:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": sampler.epoch,
            "position": sampler.position,
            "step": step,
        }
        tmp = checkpoint.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, checkpoint)
        segment["step"] = step
        segment["notice"] = notice[0] if notice else None
        _write(seg_file, json.dumps(segment))

    _write(seg_file, json.dumps(segment))
    while sampler.epoch < args.epochs and not notice:
        idx = sampler.local_indices(0, 1)
        optimizer.zero_grad()
        F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
        optimizer.step()
        epoch = sampler.epoch
        sampler.advance(1)
        if sampler.epoch != epoch:
            scheduler.step()
        time.sleep(args.step_s)
        step += 1
        now = time.time()
        if segment["first_step"] is None:
            segment["first_step"] = now
        segment["last_step_at"] = now
        if step % args.checkpoint_every == 0:
            save()
    save()
    if sampler.epoch >= args.epochs:
        done = {"test_accuracy": accuracy(model, x_te, y_te), "steps": step, "at": time.time()}
        _write(args.dir / f"{args.name}.done", json.dumps(done))


if __name__ == "__main__":
    main()
