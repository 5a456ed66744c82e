"""torch's one-time start-up costs, paid in advance: importing this module pays them.

A fresh process pays for ``import torch`` (about 1.6 s here) and again for the lazy imports
of its first optimizer (``torch._dynamo``, about 1.6 s more). A rank that joins a running job
pays both between "node ready" and its first step unless something paid them before: the
agent's warm-up thread imports this module (controller/node_agent.py) while the controller decides.
"""

from __future__ import annotations

import torch

from parsl_malleable.elastic import rank as _rank  # noqa: F401  (the runtime and backends)


def warm_torch() -> None:
    """Build one throw-away optimizer: what torch imports on first use is then imported."""
    param = torch.nn.Parameter(torch.zeros(1))
    torch.optim.SGD([param], lr=0.0)


warm_torch()
