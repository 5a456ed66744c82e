"""Elastic rank runtime: rendezvous, state, checkpoints; torch.distributed and Horovod backends.

Controller side: ``coordinator`` (``Coordinator``: the rank protocol's dispatch and lifecycle),
``membership`` (its socket-free state machine: members, epochs, assignments, events),
``measurements`` (throughput and rescale pauses), ``coordinator_server`` (its TCP front end),
``horovod_rendezvous`` (Horovod's per-epoch rendezvous servers). Rank side: ``wire`` (client),
``rank`` (``RankContext``, ``run_rank``), ``state`` (``ElasticState``, ``ElasticSampler``, resize
hooks), ``sampler`` (``ElasticDistributedSampler``, a ``DataLoader`` batch sampler), ``ddp``
(``ElasticDDP``, what ``ctx.wrap`` returns), ``horovod_backend`` (``HorovodBackend``),
``checkpoint``. Both: ``backend`` (interfaces), ``backends`` (registry), ``torch_backend``,
``horovod_common`` (what Horovod's two sides agree on).
The user-facing decorator is :func:`parsl_malleable.app.malleable_app`; see ``docs/elastic.md``.
"""
