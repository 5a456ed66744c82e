"""Reader for PBS Pro (and Torque) accounting logs (``server_priv/accounting/YYYYMMDD``).

Lines look like::

    04/02/2024 10:00:00;E;123.server;user=alice queue=workq ctime=1712052000 qtime=1712052000
        etime=1712052000 start=1712052100 end=1712055700 exec_host=n1/0*36+n2/0*36
        Resource_List.nodect=2 Resource_List.ncpus=72 Resource_List.walltime=01:00:00

with Q (queued) and S (started) records before the E (ended) one.
"""

from __future__ import annotations

import re
from pathlib import Path

from parsl_malleable.traces._accounting import read_accounting
from parsl_malleable.traces.schema import JobTrace


def read_pbs_accounting(
    path: str | Path, *, nodes: int | None = None, skip_bad: bool = False
) -> JobTrace:
    """Read a PBS Pro accounting log, joining Q/S/E records per job.

    ``submit`` is ``ctime`` (else ``qtime``), ``nodes_req`` is ``Resource_List.nodect`` (else the
    chunk count of ``Resource_List.select``), ``nodes``/``cores`` are counted from ``exec_host``
    (``n1/0*36+n2/0*36``, and Torque's ``n3/0-35+n4/0-35``, are 2 nodes, 72 cores; see
    :func:`count_pbs_hosts`), ``cores_req`` is ``Resource_List.ncpus``. The
    machine has ``nodes`` nodes, or as many as the largest job when not given (counted in the
    report as ``machine_size_inferred``). Times are rebased to the first submit.
    """
    return read_accounting(
        path, nodes=nodes, skip_bad=skip_bad, count_hosts=count_pbs_hosts, kind="pbs"
    )


def count_pbs_hosts(exec_host: str) -> tuple[int, int]:
    """Distinct hosts and total cores of a PBS Pro or Torque ``exec_host``.

    PBS Pro writes ``host/index*ncpus`` chunks (``n1/0*36+n2/0*36``: 2 hosts, 72 cores; a
    chunk without ``*`` has one core). Torque lists the cores of each host, one by one
    (``n3/0+n3/1``) or as ranges and lists (``n3/0-35+n4/0-35``, ``n5/0,2,4-7``). Anything
    else (a Cobalt ``3800-3927`` read as PBS, a range with a ``*``) gives (-1, -1), so the
    reader falls back to the request and counts it rather than guessing a size.
    """
    hosts: set[str] = set()
    cores = 0
    for chunk in exec_host.split("+"):
        host, _, slot = chunk.strip().partition("/")
        found = _SLOT.fullmatch(slot)
        if not host or not found:
            return -1, -1
        hosts.add(host)
        _, ncpus, cpus = found.groups()
        if ncpus is not None:
            cores += int(ncpus)  # PBS Pro: index*ncpus, the index numbers the chunk
            continue
        for part in cpus.split(","):
            first, _, last = part.partition("-")
            if last and int(last) < int(first):
                return -1, -1
            cores += int(last) - int(first) + 1 if last else 1
    return len(hosts), cores


# PBS Pro ``index*ncpus``, or Torque ``cpu[-cpu][,cpu[-cpu]...]``
_SLOT = re.compile(r"(\d+)\*(\d+)|(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)")
