"""Which errors raised through a training loop are a lost peer (roll back) and which are the
user's (abort the job)."""

from __future__ import annotations

import torch

from parsl_malleable.elastic.rank import is_transport_error

# The message CI printed when a grown group lost a killed rank inside a GradScaler step.
SEEN_IN_CI = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:13497: Connection reset by peer. This is typically caused by a remote worker "
    "hanging or bugs in the application."
)


def test_gloo_transport_failures_are_lost_peers():
    assert is_transport_error(RuntimeError(SEEN_IN_CI))
    assert is_transport_error(RuntimeError("Connection closed by peer [127.0.0.1]:4242"))
    assert is_transport_error(torch.distributed.DistError("timeout"))


def test_user_errors_stay_user_errors():
    assert not is_transport_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_transport_error(ValueError("Connection reset by peer"))  # not torch's kind
    assert not is_transport_error(KeyError("gloo/transport"))
