"""Slurm/PBS host lists: ``n[1-3,5]`` -> n1, n2, n3, n5, and a natural sort key for names."""

from __future__ import annotations

import re

from parsl_malleable.schedulers.records import OutputParseError

_DIGITS = re.compile(r"(\d+)")
# Real lists are short; the cap keeps a typo such as n[1-99999999] from eating memory.
MAX_HOSTS = 1_000_000


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list expression into host names, in the order written.

    Handles comma-separated items, bracketed ranges with zero padding (``n[01-03]``), several
    bracket groups in one name (``r[1-2]n[1-2]`` is the cartesian product) and empty input
    (``""``, ``"(null)"``, ``"N/A"`` give no hosts). Raises :class:`OutputParseError` on an
    unbalanced bracket, a reversed range or a non-numeric range.
    """
    text = text.strip()
    if text in {"", "(null)", "N/A", "None"}:
        return []
    hosts: list[str] = []
    for item in _split_top_level(text):
        hosts.extend(_expand_item(item, text))
        if len(hosts) > MAX_HOSTS:
            raise OutputParseError("hostlist", f"{text!r} expands to more than {MAX_HOSTS} hosts")
    return hosts


def _split_top_level(text: str) -> list[str]:
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise OutputParseError("hostlist", f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise OutputParseError("hostlist", f"unbalanced '[' in {text!r}")
    items.append("".join(current))
    return [item for item in (i.strip() for i in items) if item]


def _expand_item(item: str, whole: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        if "]" in item:
            raise OutputParseError("hostlist", f"unbalanced ']' in {whole!r}")
        return [item]
    end = item.find("]", start)
    if end < 0 or "[" in item[start + 1 : end]:
        raise OutputParseError("hostlist", f"nested or unbalanced '[' in {whole!r}")
    prefix, body, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    suffixes = _expand_item(rest, whole) if rest else [""]
    return [f"{prefix}{mid}{suffix}" for mid in _expand_ranges(body, whole) for suffix in suffixes]


def _expand_ranges(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise OutputParseError("hostlist", f"bad range {part!r} in {whole!r}")
        if not sep:
            out.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            raise OutputParseError("hostlist", f"reversed range {part!r} in {whole!r}")
        if last - first > MAX_HOSTS:
            raise OutputParseError("hostlist", f"range {part!r} in {whole!r} is too long")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(first, last + 1))
    return out


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders n2 before n10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(name) if p)
