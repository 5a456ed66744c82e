"""Secrets stay out of reprs and messages: the specs that carry the agent link's secret, a
job's coordinator token or a Horovod epoch's capability print without them (Parsl logs task
arguments at DEBUG), and still carry them where they travel."""

from __future__ import annotations

import pickle
import socket
import time

import pytest

from parsl_malleable.controller.agent_link import AgentServer
from parsl_malleable.controller.node_agent import AgentSpec, coordinator_token
from parsl_malleable.elastic.backend_interface import RendezvousInfo, info_from_json, info_to_json
from parsl_malleable.elastic.backend_registry import get_rendezvous_host
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.settings import RankSettings, RankSpec

SECRET = "5ec4e7" * 6


def _shown(obj: object) -> str:
    return repr(obj) + str(obj) + repr([obj]) + f"{obj!r:>10}"


def test_specs_print_without_their_secrets_and_still_carry_them():
    token = coordinator_token(SECRET, "job-a")
    agent = AgentSpec("127.0.0.1", 4242, SECRET, "agent-1")
    rank = RankSpec("127.0.0.1", 4242, token, RankSettings(), member_id="m1")
    info = RendezvousInfo("horovod", "127.0.0.1", 4243, 1, 2, extra=(("capability", SECRET),))
    for obj, secret in ((agent, SECRET), (rank, token), (info, SECRET)):
        assert secret not in _shown(obj), obj
        assert pickle.loads(pickle.dumps(obj)) == obj  # the secret still travels with it
    assert "agent-1" in repr(agent) and "m1" in repr(rank) and "epoch=1" in repr(info)
    assert info_from_json(info_to_json(info)).extra == (("capability", SECRET),)
    # Parsl's DEBUG line for a task: each argument's repr, cut at 100 characters.
    assert all(SECRET not in repr(arg)[:100] for arg in (agent, {"catalogue": agent}))


def test_servers_and_coordinators_print_without_their_secrets():
    server = AgentServer(("127.0.0.1", 0), SECRET, lambda h: None, lambda link, report: None, print)
    coordinator = Coordinator(get_rendezvous_host("torch"), token=SECRET)
    try:
        for obj in (server, coordinator):
            assert SECRET not in _shown(obj)
        assert not hasattr(server, "token")  # kept by the message server only
    finally:
        server.server_close()


def test_a_horovod_rendezvous_error_names_the_server_not_its_capability():
    pytest.importorskip("torch")
    from parsl_malleable.elastic.horovod_backend import HorovodRendezvousError, _http

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/{SECRET}/parsl_malleable/status"
    with pytest.raises(HorovodRendezvousError) as error:
        _http(url, time.monotonic() + 5)
    assert SECRET not in str(error.value)
    assert f"127.0.0.1:{port}/<capability>/parsl_malleable/status" in str(error.value)
