"""The digits app stages its split once per node: a private cache file, read with
``weights_only=True``; a corrupt cache is rebuilt with a warning, an unwritable one skipped."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
import torch

from apps import digits


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PM_DATA_CACHE", str(tmp_path / "cache"))
    digits.load_data.cache_clear()
    yield digits.cache_path()
    digits.load_data.cache_clear()


def test_the_split_is_staged_privately_and_read_back_equal(cache: Path) -> None:
    first = digits.load_data()
    assert cache.exists()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    digits.load_data.cache_clear()
    again = digits.load_data()
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert [len(t) for t in again] == [1347, 1347, 450, 450]


def test_a_corrupt_cache_is_rebuilt_with_a_warning(
    cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"not a torch file")
    with caplog.at_level(logging.WARNING):
        x_tr, *_ = digits.load_data()
    assert "unreadable" in caplog.text
    assert len(x_tr) == 1347
    assert torch.load(cache, weights_only=True)["x_tr"].shape == (1347, 64)


def test_an_unwritable_cache_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("PM_DATA_CACHE", str(blocker / "cache"))
    digits.load_data.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            x_tr, *_ = digits.load_data()
    finally:
        digits.load_data.cache_clear()
    assert len(x_tr) == 1347
    assert "not written" in caplog.text
