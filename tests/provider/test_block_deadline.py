"""The provider ends a block at its walltime plus a margin, whatever its scheduler and worker do.

Issue #36: on a live PBS server a 60 s block whose worker ignored the signal ran 87 s, until the
MoM's own walltime check. Here a stand-in PBS server (``fake_pbs.FakePBS``) whose MoM never
checks the walltime (a ``qsub`` first on PATH submits every block for a day) runs a block whose
worker ignores every signal: the provider must cancel it within its walltime end + the margin
(+ one poll). The emulated site does the same with a site that never enforces walltimes, and on
an emulated site that does, a block that ends before its deadline or at it is never cancelled
for its walltime. On the live PBS server (``pbs`` mark; skipped without one) the same block is
gone by its walltime end + the margin + a poll, whoever ends it. Real provider, real block
scripts, real processes; the tests wait on events.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.ledger import JobRecord
from parsl_malleable.harvest.site_profile import SiteProfile, load_profile
from parsl_malleable.harvest.states import CancelReason, end_state
from parsl_malleable.harvest.walltime import WALLTIME_MARGIN_S, walltime_margin
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.base import Script
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.records import JobState
from tests.pbs_server import PBSServer

from .conftest import wait_for as poll_until
from .fake_pbs import FakePBS

wait_for = functools.partial(poll_until, step_s=0.1)
Make = Callable[..., BackfillProvider]
# A worker that ignores every signal it may ignore and never ends by itself.
STUBBORN = "trap '' TERM INT HUP USR1 USR2 URG; exec sleep 600"
WALLTIME_S = 4  # each block's walltime: the profiles below cap it there
POLL_S = 2.0
DAY = "24:00:00"


def test_the_margin_waits_for_the_schedulers_own_check_and_a_profile_may_set_it() -> None:
    # slurmctld tests time limits every 30 s: the provider waits for that check; PBS's MoM
    # check is the site's setting (minutes) and the emulated site is exact: 5 s each.
    assert walltime_margin(load_profile("slurm-test")) == 30.0 + WALLTIME_MARGIN_S
    assert walltime_margin(load_profile("example-pbs")) == WALLTIME_MARGIN_S
    assert walltime_margin(load_profile("emulated")) == WALLTIME_MARGIN_S
    assert walltime_margin(load_profile("example-pbs").with_overrides(walltime_margin_s=12)) == 12
    # A block the provider ended at its walltime is a walltime end to Parsl, never a failure.
    state, why = end_state(JobState.CANCELLED, cancel_reason=CancelReason.WALLTIME)
    assert state is P.TIMEOUT and "walltime reached" in why


def _ended(provider: BackfillProvider) -> list[JobRecord]:
    return [r for r in provider.history() if r.end_state is not None]


def _assert_cancelled_in_time(record: JobRecord, margin: float) -> None:
    """The provider's cancel went out after the walltime end + margin, within one poll more."""
    assert record.walltime_end is not None and record.cancel_sent_at is not None, record
    late = record.cancel_sent_at - record.walltime_end
    assert margin <= late <= margin + POLL_S, (late, record)
    assert record.cancel_reason is CancelReason.WALLTIME and record.end_state is P.TIMEOUT
    assert "the scheduler had not ended it" in record.message, record


# ------------------------------------------------------------------------------ PBS


def _late_mom(pbs: FakePBS, folder: Path) -> dict[str, str]:
    """``pbs.env`` behind a ``qsub`` that asks for a day's walltime whatever the provider
    asks: the server shows that limit and its MoM never ends the block."""
    folder.mkdir()
    real = Path(pbs.env["PATH"].split(os.pathsep, 1)[0]) / "qsub"
    qsub = folder / "qsub"
    qsub.write_text(
        "#!/bin/bash\n"
        'args=(); for a in "$@"; do case "$a" in walltime=*) a=walltime=' + DAY + ";; esac; "
        'args+=("$a"); done\n'
        f'exec {shlex.quote(str(real))} "${{args[@]}}"\n'
    )
    qsub.chmod(0o755)
    return {**pbs.env, "PATH": f"{folder}{os.pathsep}{pbs.env['PATH']}"}


def _pbs_profile() -> SiteProfile:
    """One block of one node for ``WALLTIME_S``, polled every ``POLL_S``."""
    return load_profile("example-pbs").with_overrides(
        queue="workq",
        reservations=False,
        poll_interval_s=POLL_S,
        yield_grace_s=1,
        safety_margin_s=3,
        signal_margin_s=1,
        granularity_s=1,
        min_block_s=2,
        max_walltime_s=WALLTIME_S,
        max_nodes_per_block=1,
    )


def test_a_pbs_block_whose_mom_never_ends_it_is_cancelled_at_its_walltime_plus_the_margin(
    tmp_path: Path,
) -> None:
    pbs = FakePBS(tmp_path / "pbs", {"n1": {"state": "free"}})
    env = _late_mom(pbs, tmp_path / "late-mom")
    profile = _pbs_profile()
    provider = BackfillProvider(
        profile, env=env, slots=1, recycle=False, script_dir=str(tmp_path / "blocks")
    )
    try:
        provider.submit(STUBBORN, 1, "parsl.htex.block-0")
        assert wait_for(lambda: _ended(provider) != [], 60), provider.history()
        calls = pbs.calls()
    finally:
        provider.close()
        pbs.kill_everything()
    (record,) = provider.history()
    job = pbs.job(record.job_id)
    # The server held the block for a day: only the provider's qdel ended it.
    assert job["Resource_List"]["walltime"] == DAY and record.walltime_s == WALLTIME_S
    assert [c for c in calls if c.startswith("qdel")] == [f"qdel {record.job_id}"]
    _assert_cancelled_in_time(record, walltime_margin(profile))
    # The qdel's TERM ended the job's login shell (256 + 15), and the job was deleted.
    assert (job["job_state"], job["substate"], job["Exit_status"]) == ("F", 91, 271)
    assert provider.stats()["faults"] == {"walltime_cancelled": 1}
    assert provider.ended_as("backfill.0") is P.TIMEOUT


@pytest.mark.pbs
def test_on_the_live_pbs_server_a_stubborn_block_ends_by_its_walltime_plus_the_margin(
    pbs: PBSServer, tmp_path: Path
) -> None:
    # The issue's own case, shorter: the live MoM checks walltimes only now and then (a 10 s
    # block of this worker ran 27 s there with no margin). Whoever ends the block, it is gone
    # by its walltime end + the margin + a poll; an end of the provider's says so.
    profile = _pbs_profile().with_overrides(queue="backfill", max_walltime_s=10, min_block_s=5)
    provider = BackfillProvider(
        profile, env=pbs.env, slots=1, recycle=False, script_dir=str(tmp_path / "blocks")
    )
    try:
        provider.submit(STUBBORN, 1, "parsl.htex.block-0")
        assert wait_for(lambda: _ended(provider) != [], 90), provider.history()
    finally:
        provider.close()
    (record,) = provider.history()
    margin = walltime_margin(profile)
    ran = _seconds(pbs.jobs(history=True)[record.job_id]["resources_used"]["walltime"])
    assert ran <= record.walltime_s + margin + POLL_S + 1, (ran, record)
    if record.cancel_reason is not None:
        _assert_cancelled_in_time(record, margin)
    else:  # the MoM was in time this once
        assert record.end_state is P.TIMEOUT and record.cancel_sent_at is None, record


def _seconds(hms: str) -> float:
    hours, minutes, seconds = (float(x) for x in hms.split(":"))
    return hours * 3600 + minutes * 60 + seconds


# ------------------------------------------------------------------------- emulated


def _trace(path: Path) -> str:
    """Two nodes; the only native job that needs them starts far after every test."""
    rows = [(1, 0, 0, 1, 1, 60), (2, 10000, 0, 60, 2, 600)]
    lines = ["; MaxNodes: 2", "; MaxProcs: 2"]
    lines += [
        f"{i} {s} {w} {r} {k} -1 -1 {k} {wt} -1 1 1 -1 -1 -1 -1 -1 -1" for i, s, w, r, k, wt in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


class NoWalltimeSite(EmulatedSite):
    """An emulated site whose walltime check never comes: every block is given a day."""

    def submit(
        self,
        script: Script,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        name: str | None = None,
    ) -> str:
        return super().submit(script, nodes=nodes, walltime_s=86400.0, node_ids=node_ids, name=name)


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[Make]:
    """Make providers on a quiet two-node emulated site (``site_class``: the site's class);
    each is closed afterwards, with its site."""
    made: list[BackfillProvider] = []

    def make(site_class: type[EmulatedSite] = EmulatedSite, **kwargs: Any) -> BackfillProvider:
        profile = load_profile("emulated").with_overrides(
            emulated={"nodes": 2, "trace": _trace(tmp_path / "t.swf"), "speedup": 1.0,
                      "start_s": 0, "kill_grace_s": 1},
            poll_interval_s=POLL_S,
            min_block_s=2,
            max_walltime_s=WALLTIME_S,
            max_nodes_per_block=1,
            signal_margin_s=1,
        )  # fmt: skip
        provider = BackfillProvider(
            profile,
            scheduler=site_class.from_profile(profile),
            script_dir=str(tmp_path / "blocks"),
            recycle=False,
            **kwargs,
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
        assert isinstance(provider.scheduler, EmulatedSite)
        provider.scheduler.close()


def test_an_emulated_block_the_site_never_ends_is_cancelled_at_its_walltime_plus_the_margin(
    emulated: Make,
) -> None:
    provider = emulated(NoWalltimeSite, slots=1)
    provider.submit(STUBBORN, 1, "parsl.htex.block-0")
    assert wait_for(lambda: _ended(provider) != [], 40), provider.history()
    (record,) = provider.history()
    _assert_cancelled_in_time(record, walltime_margin(provider.profile))
    assert provider.scheduler.status([record.job_id])[record.job_id].state is JobState.CANCELLED
    assert provider.stats()["faults"] == {"walltime_cancelled": 1}


def test_blocks_that_end_before_or_at_their_deadline_are_never_cancelled_for_it(
    emulated: Make, tmp_path: Path
) -> None:
    # Slot 0's worker is done in a second; slot 1's ignores every signal, and the site ends
    # it at its walltime (TERM, then KILL). The provider tracked both deadlines and cancelled
    # neither: the one that ended at its walltime was gone from the next snapshot, well
    # before its walltime end + margin.
    provider = emulated(slots=2)
    # Slot 0's worker is done once the provider has seen its block running (a 1 s worker could
    # end between two polls, unseen).
    go = tmp_path / "go"
    provider.submit(f"until [ -e {go} ]; do sleep 0.05; done", 1, "parsl.htex.block-0")
    provider.submit(STUBBORN, 1, "parsl.htex.block-1")

    def seen_running() -> bool:
        return any(r.block_id == "0" and r.seen_running_at for r in provider.history())

    assert wait_for(seen_running, 40), provider.history()
    go.touch()
    assert wait_for(lambda: len(_ended(provider)) == 2, 40), provider.history()
    records = {r.block_id: r for r in provider.history()}
    for record in records.values():
        assert record.walltime_end is not None and record.seen_running_at is not None, record
        assert record.cancel_reason is None and record.cancel_sent_at is None, record
    assert records["0"].end_state is P.COMPLETED
    assert records["1"].end_state is P.TIMEOUT
    assert "walltime reached (TIMEOUT)" in records["1"].message
    assert "walltime_cancelled" not in provider.stats()["faults"]
