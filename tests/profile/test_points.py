"""MalleTrain's curve model: measured points joined by straight lines."""

from __future__ import annotations

import pytest

from parsl_malleable.profile.points import points_curve


def test_points_are_joined_and_extended_at_the_last_per_node_rate():
    curve = points_curve({1: (100.0, 5.0, 3), 4: (300.0, 9.0, 2)}, 8, prior_rate=1.0)
    assert curve(1) == 100.0
    assert curve(2) == pytest.approx(100.0 + 200.0 / 3)
    assert curve(8) == pytest.approx(600.0)  # 75 per node, as measured at 4


def test_nothing_measured_is_the_linear_prior():
    curve = points_curve({}, 16, prior_rate=2.5)
    assert curve(16) == pytest.approx(40.0) and curve(4) == pytest.approx(10.0)
