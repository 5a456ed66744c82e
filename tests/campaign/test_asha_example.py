"""The ``asha`` example campaign: ``init --list`` offers it, ``init --example asha`` writes it,
``validate`` accepts the copy, and its search space really spans bad and good models (the point
of early stopping: the trials behind are worth stopping)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from apps.digits import train_reference
from parsl_malleable.campaign.examples import example_names, example_path
from parsl_malleable.campaign.spec import Campaign
from parsl_malleable.cli import main

SEARCHES = "searches" in Campaign.model_fields
needs_searches = pytest.mark.skipif(
    not SEARCHES, reason="the campaign schema has no `searches` yet (issue #35, campaign/spec.py)"
)


def _search() -> dict:
    return yaml.safe_load(example_path("asha").read_text())["searches"][0]


def test_init_list_offers_asha_with_what_it_is() -> None:
    assert "asha" in example_names()
    out = CliRunner().invoke(main, ["init", "--list"], terminal_width=200)
    assert out.exit_code == 0, out.output
    line = next(line for line in out.output.splitlines() if line.startswith("asha "))
    assert "early stopping" in line, line


@needs_searches
def test_the_copy_init_writes_validates(tmp_path: Path) -> None:
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=tmp_path):
        wrote = runner.invoke(main, ["init", "--example", "asha"])
        assert wrote.exit_code == 0, wrote.output
        assert "parsl-malleable run asha.yaml" in wrote.output
        checked = runner.invoke(main, ["validate", "asha.yaml"], terminal_width=200)
    assert checked.exit_code == 0, checked.output
    assert "is valid" in " ".join(checked.output.split())


@needs_searches
def test_the_example_is_a_pruned_search_of_27_trials() -> None:
    from parsl_malleable.campaign.spec import load_campaign

    campaign = load_campaign(example_path("asha"))
    assert campaign.metric is not None and campaign.metric.name == "test_accuracy"
    (search,) = getattr(campaign, "searches")  # not in the schema before issue #35
    assert search.trials >= 27
    assert search.pruner.type == "asha"


def _accuracy(search: dict, lr: float, hidden: list[int]) -> float:
    """Test accuracy of one config of the example's search, trained in this process."""
    args = search["args"]
    result = train_reference(
        epochs=search["epochs"], batch_size=args["batch_size"], lr=lr, hidden=tuple(hidden),
        seed=args["seed"],
    )  # fmt: skip
    return float(result["test_accuracy"])


def test_the_space_spans_underfit_good_and_diverged_models() -> None:
    """At the example's epochs, the learning rate's two ends give models near chance (0.1 on
    ten digits) and a rate in between one above 0.95, for the smallest and the deepest net:
    configs differ in quality, so stopping the bad ones early saves real work. About 3 s."""
    search = _search()
    lr = search["space"]["lr"]
    shapes = search["space"]["hidden"]["choices"]
    assert lr["low"] < 0.1 < lr["high"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine; restored for the tests after this one
    try:
        for hidden in (shapes[0], shapes[-1]):
            assert _accuracy(search, lr["low"], hidden) < 0.3, hidden  # underfit in 9 epochs
            assert _accuracy(search, 0.1, hidden) > 0.95, hidden
            assert _accuracy(search, lr["high"], hidden) < 0.3, hidden  # diverged
    finally:
        torch.set_num_threads(threads)
