"""Labels reach batch job names, block ids, scripts and Parsl's run directories: only safe ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsl_malleable.errors import ConfigError
from parsl_malleable.provider import BackfillProvider, harvest_executor

PROFILE = Path(__file__).resolve().parents[2] / "providers" / "local-slurm.yaml"


@pytest.mark.parametrize("label", ["x; rm -rf ~", "../escape", "", "a b", "-flag", "é", "x" * 65])
def test_an_unsafe_provider_label_is_refused(label: str) -> None:
    with pytest.raises(ConfigError, match="BackfillProvider label must be 1-64 letters"):
        BackfillProvider(PROFILE, label=label, autostart=False)


def test_an_unsafe_executor_label_is_refused_and_safe_labels_pass() -> None:
    provider = BackfillProvider(PROFILE, label="site-1.gpu_a", autostart=False)
    assert provider.label == "site-1.gpu_a"
    with pytest.raises(ConfigError, match="executor label must be 1-64 letters"):
        harvest_executor(provider, label="harvest/../../tmp")
    assert harvest_executor(provider, label="harvest-2").label == "harvest-2"
