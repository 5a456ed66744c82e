"""Messages are typed both ways (issue #39): no product code writes a message as a dict literal
or reads a reply as a raw dict, and an answer of the wrong shape is an error naming the field,
not a KeyError (or a wrong default) somewhere in a rank.

Before, requests were validated and then turned back into dicts that handlers re-read with
``.get(key, default)`` (defaults written twice), and replies, assignments, notices and agent
orders were dicts end to end.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from parsl_malleable.controller.agent_link import ORDER, ExitOrder, RunRank
from parsl_malleable.elastic.messages import (
    ASSIGNMENT,
    NOTICE,
    Exit,
    Join,
    Leave,
    PeerLostNotice,
    Run,
)
from parsl_malleable.transport.server import Connection, Limits, MessageServer
from parsl_malleable.transport.wire import PeerUnavailable, RequestClient, send_message

PACKAGE = Path(__file__).resolve().parents[1] / "parsl_malleable"
SECRET = "typed-wire"


def _calls(name: str) -> list[tuple[str, int, ast.Call]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called == name:
                    found.append((str(path.relative_to(PACKAGE)), node.lineno, node))
    return found


def test_no_message_is_written_as_a_dict_literal() -> None:
    literal = [
        f"{path}:{line}"
        for path, line, call in _calls("send_message")
        if len(call.args) > 1 and isinstance(call.args[1], ast.Dict)
    ]
    assert literal == []
    assert _calls("send_message"), "the scan found the senders"


def test_only_the_client_itself_sends_raw_messages() -> None:
    # RequestClient.exchange is the transport under call(); product code calls call().
    assert [path for path, _, _ in _calls("exchange")] == ["transport/wire.py"]
    assert len(_calls("call")) >= 15  # every request of the ranks, stores and agents


def _answering(reply: dict) -> MessageServer:
    def handler(connection: Connection) -> None:
        while connection.reader.read() is not None:
            send_message(connection.sock, reply)

    server = MessageServer(("127.0.0.1", 0), SECRET, handler, "typed wire", Limits())
    server.start()
    return server


def test_an_answer_of_the_wrong_shape_is_an_error_naming_the_field() -> None:
    server = _answering({"action": "run", "epoch": 1, "rank": 0})  # no world_size, no info
    try:
        client = RequestClient(*server.server_address, SECRET)
        with pytest.raises(PeerUnavailable, match=r"malformed message \(run\.world_size"):
            client.call(Join(member="m"), ASSIGNMENT)
        client.close()
    finally:
        server.close()


def test_assignments_notices_and_orders_round_trip_as_their_own_kind() -> None:
    run = Run(epoch=2, rank=1, world_size=3, info={"backend": "torch"}, known_step=7)
    for assignment in (run, Leave(save=True), Exit(reason="done")):
        assert ASSIGNMENT.validate_python(assignment.to_json()) == assignment
    notice = PeerLostNotice(epoch=2, member="b")
    assert NOTICE.validate_python(notice.to_json()) == notice
    for order in (RunRank(job="j", member="m", host="h", port=5), ExitOrder(reason="x")):
        assert ORDER.validate_python(order.model_dump()) == order
    with pytest.raises(ValueError, match="port"):
        ORDER.validate_python({"action": "run", "job": "j", "member": "m", "host": "h", "port": 0})
