"""The hooks between parts are declared Protocols, and the parts that offer them satisfy them.

The controller used to write ``provider.demand`` and ``provider.startup_s`` and chain onto
``provider.on_yield`` after ``hasattr`` probes; the rank found backend methods with ``getattr``;
the coordinator read its rendezvous's ``table`` the same way. Each now checks a Protocol
(``harvest/controller_link.py``, ``elastic/backend_interface.py``) and calls its methods. This
test pins which real classes satisfy which, so a rename on one side fails here, not at a site.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from parsl.providers import LocalProvider

from parsl_malleable.elastic.backend_interface import (
    Abortable,
    CoordinatorKeyed,
    KeyTableHost,
    ProcessGroupBackend,
)
from parsl_malleable.elastic.torch_backend import TorchBackend, TorchRendezvousHost
from parsl_malleable.harvest.controller_link import HarvestingProvider
from parsl_malleable.provider import BackfillProvider

REPO = Path(__file__).resolve().parents[1]


def test_the_torch_backend_offers_every_optional_hook() -> None:
    backend = TorchBackend(device="cpu")
    for hook in (Abortable, CoordinatorKeyed, ProcessGroupBackend):
        assert isinstance(backend, hook), hook
    assert isinstance(TorchRendezvousHost(), KeyTableHost)


@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="Horovod not installed")
def test_the_horovod_backend_offers_none_of_them() -> None:
    from parsl_malleable.elastic.horovod_backend import HorovodBackend
    from parsl_malleable.elastic.horovod_rendezvous import HorovodRendezvousHost

    # classes, not instances: a HorovodBackend starts Horovod's runtime when made
    for hook in ("abort", "attach_coordinator", "group", "device"):
        assert not hasattr(HorovodBackend, hook), hook
    assert "table" not in vars(HorovodRendezvousHost) and not hasattr(
        HorovodRendezvousHost, "table"
    )


def test_a_backfill_provider_is_a_harvesting_provider_and_a_local_one_is_not() -> None:
    provider = BackfillProvider("emulated", autostart=False)
    try:
        assert isinstance(provider, HarvestingProvider)
        assert provider.drain_margin_s == provider.profile.drain_margin_s
        taken = provider.use_demand(lambda ctx: 1)
        assert taken and not provider.use_demand(lambda ctx: 2)  # the first demand stays
        provider.measured_startup(12.5)
        assert provider.startup_s == 12.5
    finally:
        provider.close()
    assert not isinstance(LocalProvider(), HarvestingProvider)


def test_no_part_probes_another_with_hasattr_or_writes_its_attributes() -> None:
    # The patterns the Protocols replaced, in the modules that had them.
    probes = re.compile(
        r"hasattr\((executor\.)?provider|getattr\(self\._backend|getattr\(self\._rendezvous"
        r"|provider\.(demand|startup_s|on_yield) ="
    )
    for path in ["controller/live.py", "controller/blocks.py", "elastic/rank.py",
                 "elastic/coordinator.py"]:  # fmt: skip
        text = (REPO / "parsl_malleable" / path).read_text()
        assert not probes.search(text), (path, probes.findall(text))
