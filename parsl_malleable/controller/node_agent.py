"""The worker side of the controller: one agent per HTEX worker, taking orders.

HTEX cannot send a task to a chosen worker, so the controller does not try: it sends identical
*agent* tasks to idle workers. Each agent connects back, says where it runs (node, block, local
rank), and then runs whatever ranks the controller orders, one after another, in its own
process: a node moves from job A to job B without a new batch job or a new Parsl task.

What travels where: the training functions and their arguments ride inside the agent task
(Parsl's own serialization, as for any Parsl app), as a catalogue of the jobs active when the
agent was sent; orders on the controller's channel are JSON only and name a job of that
catalogue. An agent ordered to run a job it does not carry ends with ``refresh`` and the
controller sends a new one. An agent whose rank 0 finished a job ends too, returning the
job's result through Parsl.

An agent says hello before it imports torch: the imports (torch, each catalogued training
function's module) and each function's ``prepare`` hook (:func:`prepared_by`: load the data
once per worker) run in a thread meanwhile, while the controller decides what the node does,
and the first rank order waits for them. ``AgentSpec.warm=False`` turns this off (the rank then
imports and prepares when it starts, as before; for benchmarks).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from parsl_malleable.controller.agent_link import (
    ORDER,
    TERMINATED,
    AgentHello,
    AgentReport,
    RunRank,
)
from parsl_malleable.controller.functions import resolve_function
from parsl_malleable.elastic.settings import (
    PREPARE_ATTRIBUTE,
    RankOutcome,
    RankSettings,
    RankSpec,
    failure_traceback,
)
from parsl_malleable.transport.messages import Hello, Ok
from parsl_malleable.transport.wire import PeerUnavailable, RequestClient, derive_secret

logger = logging.getLogger(__name__)


def coordinator_token(controller_secret: str, job: str) -> str:
    """The token of ``job``'s coordinator, derived from the controller's secret: the driver
    and each agent compute it, so no order ever carries it, and it reveals nothing of the
    controller's secret or of another job's token."""
    return derive_secret(controller_secret, f"coordinator/{job}")


@dataclass(frozen=True)
class AgentSpec:
    """Where an agent finds its controller (picklable: it travels in the Parsl task).

    ``token`` is the controller's secret: it is not in the repr, which Parsl logs at DEBUG
    with the task's arguments (``parsl.log``)."""

    host: str
    port: int
    token: str = field(repr=False)
    agent_id: str
    warm: bool = True


class WarmUp:
    """Imports torch and the catalogue's functions and runs their ``prepare`` hooks in a
    thread; :meth:`wait` returns when done."""

    def __init__(self, catalogue: dict[str, JobPayload]) -> None:
        self.catalogue = catalogue
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="agent-warm-up", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the imports and hooks are done (a failure was logged: the rank meets it)."""
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        began = time.monotonic()
        try:
            import parsl_malleable.elastic.warm  # noqa: F401  (torch and its first optimizer)

            for name, payload in self.catalogue.items():
                fn = resolve_function(payload.fn)
                prepare = getattr(fn, PREPARE_ATTRIBUTE, None)
                if callable(prepare):
                    logger.debug("agent: preparing job %s", name)
                    prepare(**payload.kwargs)
        except Exception:  # the rank runs the same code and reports what fails there
            logger.warning("agent warm-up failed", exc_info=True)
        self.seconds = time.monotonic() - began


@dataclass(frozen=True)
class JobPayload:
    """What an agent needs to run ranks of one job: function, arguments, rank settings.

    ``fn`` is ``(module, qualname)`` for an importable function, else the function itself.
    """

    fn: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    settings: RankSettings


@dataclass
class AgentExit:
    """How an agent task ended: ``exit`` (told to), ``refresh`` (needs a newer catalogue),
    ``finished`` (its rank 0 completed ``job``: ``outcome`` holds the result) or ``lost``
    (the controller went away)."""

    agent_id: str
    reason: str
    job: str | None = None
    outcome: RankOutcome | None = None
    message: str = ""


def where_am_i() -> dict[str, Any]:
    """This worker's node (and its index among the block's nodes), block, scheduler job and
    local rank, from the environment."""
    env = os.environ
    host = socket.gethostname().split(".")[0]
    pool = env.get("PARSL_WORKER_POOL_ID", "")
    # Slurm names the node (its NodeName, not the host). PBS does not tell a job's process its
    # vnode, and one MoM may carry several: the host plus the pool keeps two blocks there apart
    # until the controller names the node from the block's vnodes and ``node_index``.
    node = env.get("PM_NODE_NAME") or env.get("SLURMD_NODENAME") or f"{host}/{pool or os.getpid()}"
    index = env.get("PM_NODE_INDEX") or env.get("PALS_NODEID") or env.get("PBS_VNODENUM") or "0"
    return {
        "node": node,
        "node_index": int(index) if index.isdigit() else 0,
        "pool": pool or f"{host}-{os.getpid()}",
        "block": env.get("PARSL_WORKER_BLOCK_ID", ""),
        "job_id": env.get("PM_BLOCK_JOB_ID") or env.get("SLURM_JOB_ID") or env.get("PBS_JOBID"),
        "local_rank": int(env.get("PARSL_WORKER_RANK", "0") or 0),
        "local_size": int(env.get("PARSL_WORKER_COUNT", "1") or 1),
        "host": host,
        "pid": os.getpid(),
    }


def bind_device(local_rank: int) -> str:
    """Pin this process to its GPU, if there is one: ``cuda:i``, else ``cpu``.

    With HTEX's ``available_accelerators`` each worker sees one GPU (``CUDA_VISIBLE_DEVICES``),
    which is then device 0; without it, local rank ``i`` takes GPU ``i`` modulo the count.
    """
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def end_process() -> None:
    """End this worker process as SIGTERM would have before the rank caught it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _run_rank(spec: RankSpec, payload: JobPayload) -> RankOutcome:
    """Run one rank of ``payload``; a training function that raised is a ``failed`` outcome
    with its traceback (the rank has told the coordinator already)."""
    from parsl_malleable.elastic.rank import run_rank

    try:
        return run_rank(spec, resolve_function(payload.fn), payload.args, payload.kwargs)
    except Exception as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return RankOutcome(spec.member_id, "failed", reason=text, traceback=failure_traceback(exc))


def run_agent(spec: AgentSpec, catalogue: dict[str, JobPayload]) -> AgentExit:
    """Body of an agent task: connect, then run ordered ranks until told to stop."""
    here = where_am_i()
    os.environ["LOCAL_RANK"] = str(here["local_rank"])
    warm_up = WarmUp(catalogue) if spec.warm else None
    try:
        client = RequestClient(spec.host, spec.port, spec.token)
        client.call(Hello(), Ok)
        hello = AgentHello(agent=spec.agent_id, jobs=sorted(catalogue), **here)
        order = client.call(hello, ORDER)
    except PeerUnavailable as exc:
        return AgentExit(spec.agent_id, "lost", message=str(exc))
    try:
        while True:
            if not isinstance(order, RunRank):
                return AgentExit(spec.agent_id, order.action)
            job = order.job
            payload = catalogue.get(job)
            if payload is None:
                return AgentExit(spec.agent_id, "refresh", job=job)
            if warm_up is not None:
                warm_up.wait()
            rank_spec = RankSpec(
                host=order.host,
                port=order.port,
                token=coordinator_token(spec.token, job),
                settings=payload.settings,
                member_id=order.member,
                local_rank=here["local_rank"],
                device=bind_device(here["local_rank"]),
            )
            outcome = _run_rank(rank_spec, payload)
            if outcome.status == "failed":  # the job is aborted; the agent lives
                failed = AgentReport(
                    agent=spec.agent_id,
                    job=job,
                    status="failed",
                    reason=outcome.reason,
                    traceback=outcome.traceback,
                )
                order = client.call(failed, ORDER)
                continue
            if outcome.status == "finished" and outcome.rank == 0:
                # The result may be any Python object: it goes back through Parsl, not JSON.
                return AgentExit(spec.agent_id, "finished", job=job, outcome=outcome)
            if outcome.terminated:
                # The node is being taken (Slurm's preemption notice): the rank left at a
                # commit; now the process must end too, or the block outlives its notice until
                # the scheduler's kill and the native job waits that long. The report lets the
                # controller stop sending work to this worker pool.
                terminated = AgentReport(
                    agent=spec.agent_id, job=job, status=TERMINATED, reason="SIGTERM"
                )
                client.call(terminated, ORDER)
                end_process()
            done = AgentReport(
                agent=spec.agent_id, job=job, status=outcome.status, reason=outcome.reason
            )
            order = client.call(done, ORDER)
    except PeerUnavailable as exc:
        return AgentExit(spec.agent_id, "lost", message=str(exc))
    finally:
        client.close()


__all__ = [
    "AgentExit",
    "AgentSpec",
    "JobPayload",
    "WarmUp",
    "bind_device",
    "coordinator_token",
    "run_agent",
    "where_am_i",
]
