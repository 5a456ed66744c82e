"""Nodes are named as the scheduler names them: Slurm's NodeName, PBS's vnode, never the host
alone (one PBS MoM may carry several vnodes, and two blocks there are two nodes)."""

from __future__ import annotations

from parsl_malleable.controller.agent_link import AgentHello, node_name


def hello(**fields: object) -> AgentHello:
    return AgentHello.model_validate({"op": "hello", "agent": "a1", **fields})


def test_an_agent_that_knows_its_node_keeps_its_name() -> None:
    assert node_name(hello(node="n3", pool="p1"), ("n3", "n4")) == "n3"  # Slurm's NodeName
    assert node_name(hello(node="vm/p1", pool="p1")) == "vm/p1"  # no block nodes known yet


def test_an_agent_that_knows_only_its_host_is_named_by_its_blocks_vnode() -> None:
    assert node_name(hello(node="pbshost/p1", pool="p1"), ("vn2",)) == "vn2"
    assert node_name(hello(node="pbshost/p2", pool="p2", node_index=1), ("vn4", "vn5")) == "vn5"
    # An index past the block's nodes (a launcher that numbers otherwise) takes the last one.
    assert node_name(hello(node="h/p", pool="p", node_index=7), ("vn4", "vn5")) == "vn5"


def test_two_blocks_on_one_host_are_two_nodes() -> None:
    first = node_name(hello(node="pbshost/p1", pool="p1"), ("vn1",))
    second = node_name(hello(node="pbshost/p2", pool="p2"), ("vn2",))
    assert first != second
