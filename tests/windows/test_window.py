"""Grouping per-node windows into blocks."""

from __future__ import annotations

import math

import numpy as np

from parsl_malleable.windows.window import group_windows


def test_close_lengths_share_a_group_with_the_shortest_length() -> None:
    names = ["a", "b", "c", "d"]
    lengths = np.array([1000.0, 3600.0, 1050.0, 3700.0])
    windows = group_windows(names, lengths, None, 10.0, rel_tol=0.1, abs_tol=0.0)
    assert [w.nodes for w in windows] == [("a", "c"), ("b", "d")]
    assert [w.end for w in windows] == [1010.0, 3610.0]
    assert all(w.start == 10.0 and w.confidence == 1.0 for w in windows)


def test_no_node_is_promised_more_than_its_own_window() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.exponential(3600.0, size=200)
    names = [f"n{i}" for i in range(200)]
    own = dict(zip(names, lengths, strict=True))
    windows = group_windows(names, lengths, None, 0.0)
    assert sorted(n for w in windows for n in w.nodes) == sorted(names)
    for w in windows:
        assert all(w.length <= own[n] for n in w.nodes)


def test_confidence_comes_from_samples_and_short_nodes_are_dropped() -> None:
    samples = np.array([[100.0, 500.0], [200.0, 500.0], [300.0, 40.0], [400.0, 500.0]])
    windows = group_windows(
        ["x", "y"], np.array([200.0, 500.0]), samples, 0.0, min_length=150.0, abs_tol=0
    )
    assert [w.nodes for w in windows] == [("x",), ("y",)]
    assert windows[0].confidence == 0.75 and windows[1].confidence == 0.75
    dropped = group_windows(["x", "y"], np.array([100.0, 500.0]), None, 0.0, min_length=150.0)
    assert [w.nodes for w in dropped] == [("y",)]


def test_unbounded_windows_group_together() -> None:
    windows = group_windows(["a", "b"], np.array([math.inf, math.inf]), None, 0.0)
    assert len(windows) == 1 and math.isinf(windows[0].end)
