"""Host list expansion: examples and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsl_malleable.schedulers.hostlist import expand_hostlist, natural_key
from parsl_malleable.schedulers.records import OutputParseError


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
        ("n1", ["n1"]),
        ("n[1,6]", ["n1", "n6"]),
        ("node[08-11]", ["node08", "node09", "node10", "node11"]),
        ("a1,b[2-3],c", ["a1", "b2", "b3", "c"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand_examples(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "bad", ["n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[1-]", "n[[1]]", "n[1-99999999]"]
)
def test_expand_rejects_malformed(bad: str) -> None:
    with pytest.raises(OutputParseError, match="hostlist"):
        expand_hostlist(bad)


def test_natural_order() -> None:
    assert sorted(["n10", "n2", "n1", "m3"], key=natural_key) == ["m3", "n1", "n2", "n10"]


prefixes = st.text(alphabet="abcnode-", min_size=1, max_size=5).filter(
    lambda s: not s[-1].isdigit()
)


def compress(prefix: str, numbers: list[int], width: int) -> str:
    """Write numbers as Slurm would: runs of consecutive numbers become lo-hi ranges."""
    parts, run = [], [numbers[0]]
    for n in numbers[1:]:
        if n == run[-1] + 1:
            run.append(n)
        else:
            parts.append(run)
            run = [n]
    parts.append(run)
    text = ",".join(
        f"{r[0]:0{width}d}" if len(r) == 1 else f"{r[0]:0{width}d}-{r[-1]:0{width}d}" for r in parts
    )
    return f"{prefix}[{text}]"


@given(prefixes, st.sets(st.integers(0, 300), min_size=1, max_size=40), st.integers(1, 4))
def test_expand_inverts_compression(prefix: str, numbers: set[int], width: int) -> None:
    ordered = sorted(numbers)
    hosts = expand_hostlist(compress(prefix, ordered, width))
    assert hosts == [f"{prefix}{n:0{width}d}" for n in ordered]


@given(st.lists(st.tuples(prefixes, st.integers(0, 50), st.integers(0, 5)), min_size=1, max_size=6))
def test_expand_concatenates_items(items: list[tuple[str, int, int]]) -> None:
    texts = [f"{p}[{lo}-{lo + n}]" for p, lo, n in items]
    whole = expand_hostlist(",".join(texts))
    assert whole == [h for t in texts for h in expand_hostlist(t)]
    assert len(whole) == sum(n + 1 for _, _, n in items)
