"""The interchange listens on the address in use, never on every interface of the host."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import parsl
import psutil
import pytest
from parsl.addresses import address_by_hostname
from parsl.config import Config

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.listen_address import listen_address
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.provider import BackfillProvider, harvest_executor


def test_the_address_comes_from_the_executor_then_the_profile_then_the_interface() -> None:
    site = load_profile("example-slurm")
    assert site.address is None
    assert listen_address(site, "10.0.0.7") == ("10.0.0.7", "the executor's address")
    assert listen_address(site.with_overrides(address="10.0.0.8"))[0] == "10.0.0.8"
    assert listen_address(site.with_overrides(interface="lo")) == ("127.0.0.1", "interface lo")
    with pytest.raises(ConfigError, match=r"interface 'nosuch0' has no address.*'interface:'"):
        listen_address(site.with_overrides(interface="nosuch0"))


def test_a_loopback_name_is_refused_for_blocks_on_other_hosts() -> None:
    site = load_profile("example-slurm")
    emulated = load_profile("emulated").with_overrides(address=None)
    by_name = address_by_hostname()
    if ipaddress.ip_address(by_name).is_loopback:
        with pytest.raises(ConfigError, match="compute nodes cannot reach"):
            listen_address(site)
    else:
        assert listen_address(site) == (by_name, "this host's name")
    # Blocks on this host reach a loopback address.
    assert listen_address(emulated) == (by_name, "this host's name")


def _plain(ip: str) -> str:
    """``::ffff:a.b.c.d`` (an IPv6 socket bound to an IPv4 address) as ``a.b.c.d``."""
    mapped = ipaddress.ip_address(ip)
    v4 = getattr(mapped, "ipv4_mapped", None)
    return str(v4 or mapped)


def test_the_running_interchange_listens_on_that_address_only(tmp_path: Path) -> None:
    provider = BackfillProvider(
        "emulated", autostart=False, address=None, script_dir=str(tmp_path / "blocks")
    )
    executor = harvest_executor(provider)
    assert executor.address and executor.interchange_launch_cmd
    with parsl.load(Config(executors=[executor], strategy="none", run_dir=str(tmp_path / "run"))):
        listening = {
            (conn.laddr.ip, conn.laddr.port)
            for child in psutil.Process().children(recursive=True)
            for conn in child.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN
        }
    parsl.clear()
    assert listening, "the interchange listens nowhere?"
    assert {_plain(ip) for ip, _ in listening} == {executor.address}, listening
