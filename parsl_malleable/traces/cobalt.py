"""Reader for Cobalt job event logs (ALCF Theta, Mira, Polaris before PBS).

Cobalt writes PBS-style accounting records::

    03/15/2019 10:00:00;Q;12345.theta;queue=default qtime=1552644000 Resource_List.nodect=128 ...
    03/15/2019 10:05:00;S;12345.theta;... start=1552644300 exec_host=3800-3927 ...
    03/15/2019 11:00:00;E;12345.theta;... start=1552644300 end=1552647600 ...

The log does not state the machine size, so the caller gives it (``nodes``).
"""

from __future__ import annotations

from pathlib import Path

from parsl_malleable.traces._accounting import read_accounting
from parsl_malleable.traces.schema import JobTrace


def read_cobalt(path: str | Path, *, nodes: int, skip_bad: bool = False) -> JobTrace:
    """Read a Cobalt event log of a machine with ``nodes`` nodes, joining Q/S/E records per job.

    ``submit`` is ``ctime`` (else ``qtime``, else the Q record's time), ``start``/``end`` the
    ``start=``/``end=`` attributes (else the S/E record times), ``nodes_req`` is
    ``Resource_List.nodect`` and ``nodes`` the node count of ``exec_host`` when it is a list of
    node numbers and ranges (``3800-3927,4000``). Times are rebased to the first submit
    (``machine.start_epoch``). Record times are read as UTC.
    """
    return read_accounting(
        path, nodes=nodes, skip_bad=skip_bad, count_hosts=count_cobalt_hosts, kind="cobalt"
    )


def count_cobalt_hosts(exec_host: str) -> tuple[int, int]:
    """Nodes in a Cobalt ``exec_host`` such as ``3800-3927,4000`` (-1 for block names)."""
    total = 0
    for part in exec_host.replace(":", ",").split(","):
        first, sep, last = part.strip().partition("-")
        first, last = first.lstrip("nid"), last.lstrip("nid")
        if not first.isdigit() or (sep and not last.isdigit()):
            return -1, -1
        total += int(last) - int(first) + 1 if sep else 1
    return total, -1
