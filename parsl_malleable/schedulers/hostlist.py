"""Slurm/PBS host lists: ``n[1-3,5]`` -> n1, n2, n3, n5, and a natural sort key for names.

Expansion is python-hostlist's (the library NSC and others maintain for Slurm's syntax);
this module only maps its errors and Slurm's "no hosts" words onto this package's.
"""

from __future__ import annotations

import re

import hostlist

from parsl_malleable.schedulers.records import OutputParseError

_DIGITS = re.compile(r"(\d+)")
# What Slurm and PBS print for "no nodes".
_NO_HOSTS = {"", "(null)", "N/A", "None"}


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list expression into host names, in the order written.

    Handles comma-separated items, bracketed ranges with zero padding (``n[01-03]``), several
    bracket groups in one name (``r[1-2]n[1-2]`` is the cartesian product) and empty input
    (``""``, ``"(null)"``, ``"N/A"`` give no hosts). Raises :class:`OutputParseError` on an
    unbalanced bracket, a reversed range, a non-numeric range or a list too long to expand.
    """
    text = text.strip()
    if text in _NO_HOSTS:
        return []
    try:
        # allow_duplicates: keep what Slurm wrote, one name per node it listed.
        return list(hostlist.expand_hostlist(text, allow_duplicates=True))
    except hostlist.BadHostlist as exc:
        raise OutputParseError("hostlist", f"{exc} in {text!r}") from None


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders n2 before n10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(name) if p)
