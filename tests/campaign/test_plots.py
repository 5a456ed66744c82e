"""The pictures: in nodes.png the time between a killed driver and its resume is a gap, not
training; each job has a hue of its own, the same in every picture."""

from __future__ import annotations

import colorsys
import itertools
from pathlib import Path

from matplotlib.colors import to_hex, to_rgb

from parsl_malleable.campaign.plots import (
    draw_nodes,
    job_places,
    job_style,
    node_segments,
    plot_gantt,
    plot_nodes,
    plt,
)
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


def hue(colour: str) -> tuple[float, float]:
    """(hue in degrees, saturation) of a matplotlib colour."""
    h, s, _ = colorsys.rgb_to_hsv(*to_rgb(colour))
    return h * 360, s


def apart(a: float, b: float) -> float:
    """Degrees between two hues, round the colour wheel."""
    return min(abs(a - b), 360 - abs(a - b))


def distinct_hues(colours: list[str], degrees: float = 18.0) -> bool:
    """No grey (which has no hue) and every two colours ``degrees`` of hue apart."""
    hues = [hue(c) for c in colours]
    return all(s >= 0.3 for _, s in hues) and all(
        apart(a, b) >= degrees for (a, _), (b, _) in itertools.combinations(hues, 2)
    )


def test_up_to_ten_jobs_get_a_hue_each_and_more_jobs_another_line_style() -> None:
    for n in range(2, 11):
        assert distinct_hues([job_style(i)[0] for i in range(n)]), n
    # What the pictures used, tab20 in order, gives jobs 0 and 1 two shades of one blue.
    tab20 = plt.get_cmap("tab20")
    assert not distinct_hues([to_hex(tab20(i)) for i in range(2)])
    # Past ten, the colours come round with another line style and hatch: 40 jobs, 40 looks.
    assert len({job_style(i) for i in range(40)}) == 40
    assert job_style(10)[0] == job_style(0)[0] and job_style(10)[1:] != job_style(0)[1:]


def test_a_job_has_its_campaign_place_in_every_picture(tmp_path: Path) -> None:
    jobs = ["b", "a", "c"]  # the campaign's order, not the names'
    assert job_places(jobs, {"a", "z"}) == {"b": 0, "a": 1, "c": 2, "z": 3}
    samples = [
        (float(t), 1, job, 1, 1, 10.0, node)
        for t in range(20)
        for job, node in (("a", "n1"), ("c", "n2"))
    ]
    path = plot_gantt(samples, 0.0, tmp_path / "gantt.png", jobs=jobs)
    pixels = {
        tuple(p) for p in (plt.imread(path)[:, :, :3] * 255).round().astype(int).reshape(-1, 3)
    }
    for place in (1, 2):  # a and c as the campaign lists them; b never ran
        colour = tuple(round(v * 255) for v in to_rgb(job_style(place)[0]))
        assert colour in pixels, (place, colour)
    assert tuple(round(v * 255) for v in to_rgb(job_style(0)[0])) not in pixels
