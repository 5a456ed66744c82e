"""Which errors raised through a training loop are a lost peer (roll back) and which are the
user's (abort the job), and what the job's owner reads about the latter."""

from __future__ import annotations

import torch

from parsl_malleable.elastic.rank import failure_message, is_transport_error

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


def test_a_user_error_is_reported_with_what_it_was_raised_from():
    """A DataLoader re-raises a dead worker as "exited unexpectedly" from the error that
    interrupted its wait: the abort message keeps the chain, newest first."""

    def load() -> None:
        try:
            raise RuntimeError("DataLoader worker (pid 4866) is killed by signal: Bus error.")
        except RuntimeError as exc:
            raise RuntimeError("DataLoader worker (pid(s) 4866) exited unexpectedly") from exc

    try:
        load()
    except RuntimeError as exc:
        message = failure_message(exc)
    assert message == (
        "RuntimeError: DataLoader worker (pid(s) 4866) exited unexpectedly <- "
        "RuntimeError: DataLoader worker (pid 4866) is killed by signal: Bus error."
    )
    assert failure_message(ValueError("plain")) == "ValueError: plain"
    looped = KeyError("a")
    looped.__cause__ = looped  # a cycle ends the walk instead of looping
    assert failure_message(looped) == "KeyError: 'a'"
    deep = OSError("0")
    for i in range(1, 10):
        step = OSError(str(i))
        step.__cause__, deep = deep, step
    assert failure_message(deep, causes=2).count(" <- ") == 2
