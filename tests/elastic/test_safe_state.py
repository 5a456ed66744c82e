"""State sent between ranks is read with ``weights_only=True``: a peer cannot run code here."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch

from parsl_malleable.elastic.safe_state import decode_state, encode_state


class _Payload:
    """What an attacker who reached the group would send: unpickling it writes a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "ran"))


def test_a_snapshot_survives_the_round_trip() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    snapshot = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": 7,
        "fields": {"epoch": 2, "seen": [1, 2, 3], "name": "digits"},
        "rng": torch.get_rng_state(),
    }
    back = decode_state(encode_state(snapshot))
    assert back["step"] == 7 and back["fields"] == snapshot["fields"]
    assert torch.equal(back["model"]["weight"], model.state_dict()["weight"])
    assert torch.equal(back["rng"], snapshot["rng"])
    assert back["optimizer"]["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert decode_state(encode_state(None)) is None


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_pickled_object_from_a_peer_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save(_Payload(marker), buffer)  # a torch.save file, as encode_state writes, but hostile
    data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        decode_state(data)
    assert not marker.exists()
    # Raw pickle bytes (the old wire format) are refused the same way.
    raw = torch.frombuffer(bytearray(pickle.dumps(_Payload(marker))), dtype=torch.uint8)
    with pytest.raises((pickle.UnpicklingError, RuntimeError)):
        decode_state(raw)
    assert not marker.exists()


def test_state_that_could_not_be_read_back_fails_where_it_is_sent() -> None:
    with pytest.raises(ValueError, match=r"training state\['fields'\]\['table'\] is a"):
        encode_state({"fields": {"table": object()}})
