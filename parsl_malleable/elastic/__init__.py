"""Elastic rank runtime: rendezvous, state, checkpoints; torch.distributed and Horovod backends.

Modules: ``coordinator`` (membership epochs, controller side) and ``coordinator_server`` (its TCP
front end), ``wire`` (rank-side client), ``rank`` (``RankContext``, ``run_rank``), ``state``
(``ElasticState``, ``ElasticSampler``, resize hooks), ``sampler`` (``ElasticDistributedSampler``,
a ``DataLoader`` batch sampler), ``ddp`` (``ElasticDDP``, what ``ctx.wrap`` returns), ``backend``
(interfaces), ``backends`` (registry), ``torch_backend``, ``horovod_backend``, ``checkpoint``.
The user-facing decorator is :func:`parsl_malleable.app.malleable_app`; see ``docs/elastic.md``.
"""
