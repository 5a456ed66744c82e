"""nodes.png: the time between a killed driver and its resume is a gap, not training."""

from __future__ import annotations

from pathlib import Path

from parsl_malleable.campaign.plots import draw_nodes, node_segments, plot_nodes, plt
from parsl_malleable.campaign.results import write_results
from parsl_malleable.campaign.store import CampaignStore

SITE = {"total": 6, "native": 2, "harvested": 3, "training": 3, "idle": 1}


def killed_and_resumed(tmp_path: Path) -> CampaignStore:
    """Run 1 samples 0..9 s and dies; nothing until run 2 resumes at 60 s and samples 10 s;
    run 2 then pauses 30 s (a stopped driver) and samples 3 s more."""
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    store.sync_jobs([("a", {"app": "m:f"}, {})])
    job = {"a": {"nodes": 3, "world": 3, "rate": 10.0, "node_names": ["n1", "n2", "n3"]}}
    for t in range(10):
        store.record(float(t), 1, 1.0, job, SITE)
    store.begin_run("c.yaml", now=60.0)
    for t in [*range(60, 70), *range(100, 103)]:
        store.record(float(t), 2, 1.0, job, SITE)
    return store


def test_samples_split_where_no_driver_ran(tmp_path: Path) -> None:
    store = killed_and_resumed(tmp_path)
    segments = node_segments(store.site_samples())
    spans = [(s[0][0], s[-1][0], s[0][1]) for s in segments]
    assert spans == [(0.0, 9.0, 1), (60.0, 69.0, 2), (100.0, 102.0, 2)]


def test_nothing_is_drawn_in_the_gaps(tmp_path: Path) -> None:
    store = killed_and_resumed(tmp_path)
    fig, ax = plt.subplots()
    try:
        drawn = draw_nodes(ax, store.site_samples(), started=0.0)
        assert drawn
        covered = []
        for artist in drawn:
            for path in artist.get_paths():
                xs = path.vertices[:, 0]
                covered.append((float(xs.min()), float(xs.max())))
    finally:
        plt.close(fig)
    # Each stretch ends one sample interval after its last sample; the gaps stay empty.
    for gap_start, gap_end in [(10.0, 60.0), (70.0, 100.0)]:
        for low, high in covered:
            assert high <= gap_start or low >= gap_end, (low, high, gap_start, gap_end)
    assert min(low for low, _ in covered) == 0.0 and max(h for _, h in covered) == 103.0
    assert plot_nodes(store.site_samples(), 0.0, 0.75, tmp_path / "nodes.png").stat().st_size
    assert tmp_path / "nodes.png" in write_results(store, tmp_path)
    store.close()
