"""Where agents and ranks reach the controller, and how many ranks a node runs."""

from __future__ import annotations

from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider

from parsl_malleable.errors import ConfigError

LOOPBACK = "127.0.0.1"


def controller_address(executor: HighThroughputExecutor) -> str:
    """The address ranks and agents reach this process at, never silently loopback.

    The executor's own ``address`` when set; loopback when every block runs on this host
    (LocalProvider, or a site profile saying so); otherwise a :class:`ConfigError` naming what
    to set.
    """
    if executor.address:
        return str(executor.address)
    provider = executor.provider
    if isinstance(provider, LocalProvider):
        return LOOPBACK
    profile = getattr(provider, "profile", None)
    if profile is not None and getattr(profile, "address", None):
        return str(profile.address)
    raise ConfigError(
        f"executor {executor.label!r}: its blocks run on other hosts, and nothing says which "
        f"address of this host they can reach; set address= on harvest_executor() (or on the "
        f"HighThroughputExecutor), e.g. parsl.addresses.address_by_interface('hsn0'), or "
        f"'address:' in the site profile"
    )


def workers_per_node(executor: HighThroughputExecutor) -> int:
    """Ranks per node: the executor's workers per node (one per GPU on GPU sites)."""
    count = getattr(executor, "workers_per_node", None) or getattr(executor, "_workers_per_node", 1)
    return max(1, int(count or 1))


__all__ = ["LOOPBACK", "controller_address", "workers_per_node"]
