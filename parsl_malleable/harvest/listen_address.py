"""The one address of the driver's host that Parsl's interchange listens on.

Given no ``address``, Parsl's HighThroughputExecutor binds its interchange to every interface
(``tcp://*``) and has workers probe each address of the host. A harvesting driver runs on a
shared login node, so the interchange listens on the address compute nodes reach and nowhere
else: the executor's ``address``, else the profile's ``address``, else the address of the
profile's ``interface``, else the address this host's name resolves to. An address that
cannot be found, or a loopback address for blocks on other hosts, is a
:class:`~parsl_malleable.errors.ConfigError` naming what to set.
"""

from __future__ import annotations

import ipaddress
import logging

from parsl.addresses import address_by_hostname, address_by_interface

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import SiteProfile

logger = logging.getLogger(__name__)

HINT = (
    "set 'address:' or 'interface:' in the site profile, or address= on harvest_executor() "
    "(e.g. parsl.addresses.address_by_interface('hsn0'))"
)


def listen_address(profile: SiteProfile, given: str | None = None) -> tuple[str, str]:
    """``(address, where it came from)`` for the interchange and the controller's servers."""
    if given:
        return given, "the executor's address"
    if profile.address:
        return profile.address, f"profile {profile.name!r} address"
    if profile.interface:
        try:
            return address_by_interface(profile.interface), f"interface {profile.interface}"
        except OSError as exc:
            raise ConfigError(
                f"profile {profile.name!r}: interface {profile.interface!r} has no address "
                f"({exc}); {HINT}"
            ) from exc
    try:
        found = address_by_hostname()
    except OSError as exc:
        raise ConfigError(f"cannot resolve this host's name ({exc}); {HINT}") from exc
    if _is_loopback(found) and not profile.blocks_on_this_host:
        raise ConfigError(
            f"this host's name resolves to {found}, which compute nodes cannot reach; {HINT}"
        )
    return found, "this host's name"


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


__all__ = ["HINT", "listen_address"]
