"""What a user sees of a campaign: the live table's statuses agree with its title, log lines
print above it without mangling it, a resume is said on the terminal, and the tables stay
readable at 80 columns."""

from __future__ import annotations

import io
import logging
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.live import Live
from rich.table import Table

from parsl_malleable.campaign.display import fitted_table, live_table
from parsl_malleable.campaign.runner import CampaignRunner
from parsl_malleable.campaign.spec import parse_campaign
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.campaign.terminal import TERMINAL, terminal_handler
from parsl_malleable.cli import main

APP = "parsl_malleable.apps.digits:train_elastic"
SAMPLE = {"rate": 50.0, "node_names": [], "step": 10, "rescales": 0, "new_rescales": 0}


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[CampaignRunner]:
    """A runner in its second run, as its loop leaves it after a sample: ``train`` holds two
    nodes with its ranks up; ``boot`` was given a node, its rank not up yet; ``held`` trained in
    run 1 and holds no node now; ``fresh`` never had one; ``over`` is done. What ``execute``
    sets up is set by hand: nothing here starts Parsl."""
    jobs = ["train", "boot", "held", "fresh", "over"]
    campaign = parse_campaign(
        {
            "site": "emulated",
            "metric": {"name": "test_accuracy", "direction": "max"},
            "jobs": [{"name": n, "app": APP} for n in jobs],
        }
    )
    runner = CampaignRunner(campaign, tmp_path / "out", source="c.yaml")
    store = runner.store = CampaignStore(runner.output)
    store.begin_run("c.yaml", now=0.0)
    store.sync_jobs((job.name, job.model_dump(), params) for job, params in campaign.expanded())
    for name in jobs:
        store.mark_submitted(name, None)
    store.record(1.0, 1, 1.0, {"held": {**SAMPLE, "nodes": 1, "world": 1}}, None)
    store.finish("over", 1, result={"steps": 30, "test_accuracy": 0.912})
    runner.run = store.begin_run("c.yaml", now=50.0)
    runner.last_jobs = {
        "train": {**SAMPLE, "nodes": 2, "world": 2},
        "boot": {**SAMPLE, "nodes": 1, "world": 0, "step": None},
        "held": {**SAMPLE, "nodes": 0, "world": 0, "rate": None},
        "fresh": {**SAMPLE, "nodes": 0, "world": 0, "rate": None, "step": None},
    }
    store.record(51.0, runner.run, 1.0, runner.last_jobs, None)
    yield runner
    store.close()


def rendered(table: Table, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(table)
    return console.export_text()


def rows_of(text: str) -> dict[str, list[str]]:
    """Cells of each table row that starts a job (first cell not blank), by job."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if line.lstrip().startswith("│") and cells[0]:
            rows[cells[0]] = cells
    return rows


def test_a_job_holding_no_node_is_not_running_and_the_title_counts_the_rows(
    runner: CampaignRunner,
) -> None:
    text = rendered(live_table(runner), width=200)
    rows = rows_of(text)
    shown = {job: cells[1] for job, cells in rows.items()}
    assert shown == {
        "train": "running",
        "boot": "starting",
        "held": "paused",
        "fresh": "waiting",
        "over": "done",
    }, text
    # Every count in the title is the rows' count of that status, and the rows have no other.
    title = re.search(r"jobs: (.*)", text)
    assert title is not None, text
    counts = {status: int(n) for n, status in re.findall(r"(\d+) (\w+)", title.group(1))}
    assert counts == Counter(shown.values()), text
    # What the new words mean is said under the table.
    said = " ".join(text.split())  # the caption wraps
    assert "paused: trained, holds no node now" in said and "starting: nodes given" in said


def test_the_live_table_fits_80_columns_with_no_cut_word(runner: CampaignRunner) -> None:
    text = rendered(live_table(runner, width=80), width=80)
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = rows_of(text)
    assert rows["over"][-1] == "0.912" and rows["train"][1] == "running", text
    assert "test_accuracy" in text and "left out at 80 columns: ranks" in text


def test_status_at_80_columns_keeps_the_results_whole(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    names = ["lr0.05-hidden128", "lr0.08-hidden128-64", "failing"]
    store.sync_jobs([(n, {"app": "m:f", "total_steps": 3000}, {}) for n in names])
    for name in names:
        store.mark_submitted(name, 1200)
    store.record(10.0, 1, 1.0, {"lr0.08-hidden128-64": {**SAMPLE, "nodes": 1, "world": 1}}, None)
    store.finish("lr0.05-hidden128", 1, result={"steps": 3000, "test_accuracy": 0.9733})
    store.finish("failing", 1, error="ValueError: the learning rate must be positive")
    store.close()
    out = CliRunner().invoke(main, ["status", str(tmp_path)], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert "…" not in out.output, out.output
    assert max(len(line) for line in out.output.splitlines()) <= 80, out.output
    rows = rows_of(out.output)
    assert rows["lr0.05-hidden128"][-2:] == ["test_accuracy=0.973", ""], out.output
    # The columns left out are named, and a wider terminal has them all.
    assert "left out at 80 columns: resumed at" in out.output
    wide = CliRunner().invoke(main, ["status", str(tmp_path)], env={"COLUMNS": "200"})
    assert "left out" not in wide.output and "resumed at" in wide.output


def test_a_table_narrower_than_its_words_folds_them_instead_of_cutting() -> None:
    table = fitted_table(
        "t",
        None,
        ["job", "result"],
        [["a-rather-long-job-name", "test_accuracy=0.9733"]],
        width=20,
        optional=(),
    )
    text = rendered(table, width=20)
    assert "…" not in text
    cells = [line.strip("│").split("│") for line in text.splitlines() if line.startswith("│")]
    assert "".join(c[0].strip() for c in cells) == "a-rather-long-job-name"
    assert "".join(c[1].strip() for c in cells) == "test_accuracy=0.9733"


# ------------------------------------------------------------------------ the terminal


def screen(raw: str, width: int) -> list[str]:
    """What a terminal ``width`` columns wide shows after ``raw``: printable characters, CR,
    LF, cursor up (CSI n A) and erase line (CSI 2 K); other CSI sequences change nothing seen."""
    lines: list[list[str]] = [[]]
    row = col = 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]", raw):
        if token == "\n":
            row, col = row + 1, 0
        elif token == "\r":
            col = 0
        elif token.startswith("\x1b["):
            if token.endswith("A"):
                row = max(0, row - int(token[2:-1] or 1))
            elif token == "\x1b[2K":
                lines[row] = []
            continue
        else:
            if col == width:  # the terminal wraps
                row, col = row + 1, 0
            while len(lines) <= row:
                lines.append([])
            lines[row] += [" "] * (col + 1 - len(lines[row]))
            lines[row][col] = token
            col += 1
        while len(lines) <= row:
            lines.append([])
    return ["".join(line).rstrip() for line in lines]


def table(n: int) -> Table:
    table = Table(title=f"refresh {n}")
    table.add_column("job")
    table.add_row(f"a{n}")
    return table


def shown_with(old_way: bool = False) -> tuple[list[str], str]:
    """The terminal after a live table is drawn, a warning is logged, and it is drawn again,
    the warning handled by :func:`terminal_handler`, or with ``old_way`` by a stream handler
    writing to the same terminal (as runs did); and the warning's line."""
    out = io.StringIO()
    console = Console(
        file=out, width=100, force_terminal=True, force_interactive=True, color_system=None
    )
    log = logging.getLogger("parsl_malleable.test_live_view")
    log.propagate = False
    handler: logging.Handler = terminal_handler(console)
    if old_way:
        handler = logging.StreamHandler(out)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    try:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            live.update(table(1), refresh=True)
            log.warning("block 3 was reclaimed by a native job")
            live.update(table(2), refresh=True)
    finally:
        log.removeHandler(handler)
    return screen(out.getvalue(), 100), (
        "WARNING parsl_malleable.test_live_view: block 3 was reclaimed by a native job"
    )


def test_a_warning_prints_above_the_live_table_and_leaves_it_whole() -> None:
    lines, warning = shown_with()
    clean = rendered(table(2), width=100).rstrip("\n").splitlines()
    clean = [line.rstrip() for line in clean]
    assert [line for line in lines if line] == [warning, *clean], "\n".join(lines)
    # The way it was, the same check sees the table mangled: the warning is lost or inside it.
    old, _ = shown_with(old_way=True)
    assert [line for line in old if line] != [warning, *clean]


def test_the_terminal_shows_warnings_and_marked_info_only(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=200, record=True)
    handler = terminal_handler(console)
    ours = logging.getLogger("parsl_malleable.campaign.test_live_view")
    parsl = logging.getLogger("parsl.test_live_view")
    for log in (ours, parsl):
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(handler)
    try:
        ours.info("job a resumes from its checkpoint at step 40", extra={TERMINAL: True})
        ours.info("the controller decided: a 2 nodes")  # campaign.log only
        ours.warning("1 block(s) were reclaimed by native jobs")
        parsl.error("an agent task was lost with its block")  # expected here: runinfo/ only
        parsl.info("a marked Parsl record", extra={TERMINAL: True})
    finally:
        for log in (ours, parsl):
            log.removeHandler(handler)
    assert console.export_text().splitlines() == [
        "job a resumes from its checkpoint at step 40",
        "WARNING parsl_malleable.campaign.test_live_view: 1 block(s) were reclaimed by native jobs",
    ]
