"""Training counted as steps advanced: the campaign's site samples record the node-seconds the
ranks spent in training steps (the controller's phase log), the training fraction is those over
the harvested node-seconds, and every node's start-up is in ``startup.csv`` phase by phase."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from parsl_malleable.campaign.results import (
    assigned_fraction,
    node_time,
    summary_lines,
    training_fraction,
    write_results,
)
from parsl_malleable.campaign.runner import CampaignRunner
from parsl_malleable.campaign.spec import parse_campaign
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.controller.phases import BlockPhase, PhaseLog
from parsl_malleable.snapshot import Node, NodeState, RunningJob, Snapshot

APP = "parsl_malleable.apps.digits:train_elastic"


def site(harvested: int, assigned: int, stepping_s: float | None) -> dict[str, Any]:
    return {
        "total": 4,
        "native": 0,
        "harvested": harvested,
        "assigned": assigned,
        "idle": 4 - harvested,
        "stepping_s": stepping_s,
    }


def test_training_fraction_counts_node_seconds_in_steps(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    job = {"a": {"nodes": 2, "world": 0, "node_names": ["n1", "n2"], "step": None}}
    # Each row's stepping_s is what was stepped in the interval that ends at it. The jobs hold
    # both nodes from the start, but their ranks make no step in the first 10 s (starting).
    store.record(0.0, 1, 1.0, job, site(2, 2, 5.0))  # before the first sample: not counted
    store.record(10.0, 1, 10.0, job, site(2, 2, 0.0))
    store.record(20.0, 1, 10.0, job, site(2, 2, 12.0))
    store.record(30.0, 1, 10.0, job, site(2, 2, 20.0))
    spent = node_time(store)
    assert spent.harvested == pytest.approx(60.0) and spent.assigned == pytest.approx(60.0)
    assert spent.stepping == pytest.approx(32.0) and spent.unmeasured == 0.0
    assert training_fraction(store) == pytest.approx(32 / 60)
    assert assigned_fraction(store) == pytest.approx(1.0)  # what used to be called training
    (line,) = summary_lines(store)
    assert "training (in steps) 53.3% of harvested, nodes given to jobs 100.0%" in line
    store.close()


def test_holding_nodes_without_a_step_is_no_training(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    for t in (0.0, 10.0, 20.0):
        store.record(t, 1, 10.0, {}, site(3, 3, 0.0))
    assert training_fraction(store) == 0.0 and assigned_fraction(store) == 1.0
    store.close()


# ---------------------------------------------------------------- the runner's samples


def make_runner(tmp_path: Path) -> CampaignRunner:
    """A runner as ``execute`` leaves it before its loop, without Parsl."""
    campaign = parse_campaign({"site": "emulated", "jobs": [{"name": "a", "app": APP}]})
    runner = CampaignRunner(campaign, tmp_path / "out", source="c.yaml")
    runner.output.mkdir(mode=0o700)
    store = runner.store = CampaignStore(runner.output)
    store.sync_jobs([("a", {"app": APP}, {})])
    runner.run = store.begin_run("c.yaml", now=0.0)
    store.mark_submitted("a", None)
    return runner


def stand_in_job() -> SimpleNamespace:
    """What ``_sample`` reads of an ElasticJob: not ended, no epochs, no metrics."""
    return SimpleNamespace(
        ended=False,
        coordinator=SimpleNamespace(epochs=list),
        take_metrics=lambda: SimpleNamespace(cut=None, records=[]),
    )


def controller(nodes: int, phases: PhaseLog | None) -> SimpleNamespace:
    state = {"jobs": {"a": {"nodes": nodes, "world_size": nodes, "node_names": [], "step": 3}}}
    fake = SimpleNamespace(state=lambda: state)
    if phases is not None:
        fake.phases = phases
    return fake


def snapshot(now: float, ours: dict[str, float], busy: tuple[str, ...] = ()) -> Snapshot:
    """Nodes n1..n3: ``ours`` (node -> block start) in blocks of ours, ``busy`` held by a
    native job, the rest idle."""
    nodes = [
        Node(n, NodeState.ALLOCATED if n in ours or n in busy else NodeState.IDLE)
        for n in ("n1", "n2", "n3")
    ]
    running = [RunningJob(f"b-{n}", (n,), t, 600.0, ours=True) for n, t in ours.items()]
    running += [RunningJob("native", busy, 0.0, 600.0)] if busy else []
    return Snapshot(now=now, nodes=nodes, running=running)


def test_each_sample_records_the_steps_of_its_interval(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    assert runner.store is not None
    runner.jobs = {"a": stand_in_job()}
    log = PhaseLog()
    provider = SimpleNamespace(last_snapshot=None)
    two = controller(2, log)
    # No snapshot yet: no row; what was stepped goes into the first row that is written.
    log.add_training("b/1", "n1", 0.5)
    runner._sample(two, provider, 1.0, 1.0)
    provider.last_snapshot = snapshot(1.5, {"n1": 1.0, "n2": 1.0})
    log.add_training("b/1", "n1", 1.0)
    runner._sample(two, provider, 2.0, 1.0)
    log.add_training("b/1", "n1", 1.0)
    log.add_training("b/1", "n2", 0.5)
    runner._sample(two, provider, 3.0, 1.0)
    runner._sample(two, provider, 4.0, 1.0)  # nodes held, no step made
    rows = [(r[0], r[5], r[7]) for r in runner.store.site_samples()]
    assert rows == [(2.0, 2, 1.5), (3.0, 2, 1.5), (4.0, 2, 0.0)]
    assert runner.last_site is not None and runner.last_site.stepping == 0.0
    assert runner.stepping_s == pytest.approx(3.0)
    assert runner.training_fraction == pytest.approx(3.0 / 6.0)  # 2 harvested x 3 samples
    # The phase log forgets its oldest blocks past its limit: its total drops; the interval
    # counts nothing rather than a negative figure, and counting goes on from the new total.
    runner._stepping_seen = 10.0
    runner._sample(two, provider, 5.0, 1.0)
    log.add_training("b/1", "n1", 1.0)
    runner._sample(two, provider, 6.0, 1.0)
    assert [r[7] for r in runner.store.site_samples()][-2:] == [0.0, 1.0]
    runner.store.close()


def test_a_controller_without_a_phase_log_records_no_stepping_figure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = make_runner(tmp_path)
    assert runner.store is not None
    runner.jobs = {"a": stand_in_job()}
    provider = SimpleNamespace(last_snapshot=snapshot(0.5, {"n1": 0.0}))
    with caplog.at_level(logging.WARNING, logger="parsl_malleable.campaign.runner"):
        for t in (1.0, 2.0, 3.0):
            runner._sample(controller(1, None), provider, t, 1.0)
    warned = [r for r in caplog.records if "keeps no phase log" in r.getMessage()]
    assert len(warned) == 1  # said once, not at every sample
    assert [r[7] for r in runner.store.site_samples()] == [None, None, None]
    assert runner.training_fraction is None and runner.last_site is not None
    assert runner.last_site.harvest_text() == "1 harvested, 1 with ranks, steps not counted"
    assert training_fraction(runner.store) is None and assigned_fraction(runner.store) == 1.0
    line = summary_lines(runner.store)[0]
    assert "training in steps not counted" in line
    runner.store.close()


def test_startup_csv_has_each_phase_of_every_node_that_stepped(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    assert runner.store is not None
    log = PhaseLog()
    idle = controller(0, log)
    provider = SimpleNamespace(last_snapshot=snapshot(90.0, {}, busy=("n1",)))
    runner._sample(idle, provider, 90.0, 1.0)  # n1 held by a native; n2, n3 idle already
    provider.last_snapshot = snapshot(95.0, {})  # n1 went idle
    runner._sample(idle, provider, 95.0, 1.0)
    provider.last_snapshot = snapshot(103.0, {"n1": 102.0, "n3": 104.0})
    runner._sample(idle, provider, 103.0, 1.0)
    # Block b1 on n1 and n2: n2's rank never made a step (no row); b2 on n3 has no start
    # stamp from its scheduler (queued blank) and n3 was idle before anyone looked.
    for block, phase, when, node in [
        ("b1/101", BlockPhase.SUBMITTED, 100.0, ""),
        ("b1/101", BlockPhase.RUNNING, 102.0, ""),
        ("b1/101", BlockPhase.WORKER, 104.5, "n1"),
        ("b1/101", BlockPhase.WORKER, 105.0, "n2"),
        ("b1/101", BlockPhase.JOINED, 107.0, "n1"),
        ("b1/101", BlockPhase.JOINED, 107.5, "n2"),
        ("b1/101", BlockPhase.FIRST_STEP, 108.0, "n1"),
        ("b2/102", BlockPhase.SUBMITTED, 104.0, ""),
        ("b2/102", BlockPhase.WORKER, 106.0, "n3"),
        ("b2/102", BlockPhase.JOINED, 110.0, "n3"),
        ("b2/102", BlockPhase.FIRST_STEP, 111.0, "n3"),
    ]:
        log.record(block, phase, when, node, "a")
    runner._sample(idle, provider, 112.0, 1.0)
    written = write_results(runner.store, runner.output)
    assert runner.output / "startup.csv" in written
    table = pd.read_csv(runner.output / "startup.csv")
    assert list(table.columns) == [
        "run",
        "block",
        "node",
        "first_step_at_s",
        "queued_s",
        "worker_start_s",
        "rank_start_s",
        "first_step_s",
        "idle_to_first_step_s",
    ]
    assert table["node"].tolist() == ["n1", "n3"] and table["run"].tolist() == [1, 1]
    n1, n3 = table.iloc[0], table.iloc[1]
    assert (n1["queued_s"], n1["worker_start_s"], n1["rank_start_s"]) == (2.0, 2.5, 2.5)
    assert (n1["first_step_s"], n1["idle_to_first_step_s"]) == (1.0, 13.0)
    assert n1["first_step_at_s"] == 108.0  # the campaign started at 0
    assert pd.isna(n3["queued_s"]) and pd.isna(n3["worker_start_s"])
    assert (n3["rank_start_s"], n3["first_step_s"]) == (4.0, 1.0)
    assert pd.isna(n3["idle_to_first_step_s"])  # idle since before the first snapshot
    line = summary_lines(runner.store)[-1]
    assert line == (
        "start-up, median of 2 node(s): queued 2.0 s, worker start 2.5 s, rank start 3.2 s, "
        "first step 1.0 s; idle -> first step 13.0 s (n=1)"
    )
    runner.store.close()


def test_a_late_stamp_replaces_the_stored_start_up(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    assert runner.store is not None
    log = PhaseLog()
    log.record("b1/101", BlockPhase.JOINED, 5.0, "n1")
    log.record("b1/101", BlockPhase.FIRST_STEP, 6.0, "n1")
    runner._keep_startups(SimpleNamespace(phases=log))
    assert runner.store.node_startups()[0].submitted is None
    log.record("b1/101", BlockPhase.SUBMITTED, 1.0)
    log.record("b1/101", BlockPhase.FIRST_STEP, 6.0, "n2")  # a new first step: read again
    runner._keep_startups(SimpleNamespace(phases=log))
    rows = runner.store.node_startups()
    assert [(r.node, r.submitted) for r in rows] == [("n1", 1.0), ("n2", 1.0)]
    runner.store.close()


# ---------------------------------------------------------------- end to end, emulated site


@pytest.mark.slow
def test_an_emulated_campaign_records_steps_within_the_nodes_it_held(tmp_path: Path) -> None:
    """One short campaign on the emulated site: the stepping node-seconds are there, and no
    more than the node-seconds given to jobs, themselves no more than the harvested ones; each
    node that trained has its start-up in startup.csv, and the run's end says both."""
    import yaml

    from tests.campaign import runs

    campaign = tmp_path / "tiny.yaml"
    campaign.write_text(
        yaml.safe_dump(
            {
                "site": "emulated",
                "python_path": [str(runs.REPO)],
                "time_limit_s": 240,
                "jobs": [
                    {
                        "name": "a",
                        "app": "apps.digits:train_elastic",
                        "epochs": 1,
                        "max_nodes": 2,
                        "total_steps": 45,
                        "args": {"step_delay_s": 0.05},
                    }
                ],
            }
        )
    )
    output = tmp_path / "out"
    done = runs.run(campaign, output, timeout_s=400)
    assert done.returncode == 0, done.stderr[-4000:]
    store = CampaignStore(output, read_only=True)
    try:
        spent = node_time(store)
        samples = store.site_samples()
    finally:
        store.close()
    assert all(s[7] is not None for s in samples)  # every sample counted steps
    assert 0 < spent.stepping <= spent.assigned <= spent.harvested, spent
    table = pd.read_csv(output / "startup.csv")
    assert len(table) >= 1, table
    phases = table[["queued_s", "worker_start_s", "rank_start_s", "first_step_s"]]
    assert phases.notna().all().all() and (phases >= 0).all().all(), table
    said = " ".join(done.stderr.split())
    assert "training (in steps)" in said and "start-up, median of" in said, said[-2000:]
