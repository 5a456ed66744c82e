"""``parsl_malleable.set_stream_logger`` / ``set_file_logger``: the project's records reach the
user's stream or file, once, however often a notebook cell calls them."""

from __future__ import annotations

import io
import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import parsl_malleable


@pytest.fixture
def clean_logger() -> Iterator[logging.Logger]:
    """The project's logger as the test found it, afterwards."""
    logger = logging.getLogger("parsl_malleable")
    handlers, level = list(logger.handlers), logger.level
    yield logger
    for handler in logger.handlers:
        if handler not in handlers:
            handler.close()
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_stream_logger_is_attached_once_and_shows_module_records(
    clean_logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    first = parsl_malleable.set_stream_logger(level=logging.INFO, stream=stream)
    again = parsl_malleable.set_stream_logger(level=logging.INFO, stream=stream)
    assert again is first
    assert sum(1 for h in clean_logger.handlers if h is first) == 1
    assert len(clean_logger.handlers) == len(set(clean_logger.handlers))
    module = logging.getLogger("parsl_malleable.controller.policy")
    module.info("decision: job a gets 3 nodes")
    module.debug("not shown at INFO")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines  # once, not once per call
    assert "parsl_malleable.controller.policy INFO: decision: job a gets 3 nodes" in lines[0]
    # Called again with another level: the same handler, now showing DEBUG.
    assert parsl_malleable.set_stream_logger(level=logging.DEBUG, stream=stream) is first
    module.debug("shown at DEBUG")
    assert stream.getvalue().count("\n") == 2 and "shown at DEBUG" in stream.getvalue()


def test_file_logger_is_private_attached_once_and_removable(
    clean_logger: logging.Logger, tmp_path: Path
) -> None:
    path = tmp_path / "logs" / "parsl_malleable.log"
    handler = parsl_malleable.set_file_logger(path)
    assert parsl_malleable.set_file_logger(str(path)) is handler
    logging.getLogger("parsl_malleable.harvest.yielding").warning("block 3 yields to job 77")
    text = path.read_text()
    assert text.count("block 3 yields to job 77") == 1
    assert "WARNING" in text and "parsl_malleable.harvest.yielding" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    parsl_malleable.remove_logger(handler)
    assert handler not in clean_logger.handlers
    logging.getLogger("parsl_malleable.harvest.yielding").warning("after removal")
    assert "after removal" not in path.read_text()


def test_other_loggers_are_not_captured(clean_logger: logging.Logger) -> None:
    stream = io.StringIO()
    parsl_malleable.set_stream_logger(stream=stream)
    logging.getLogger("parsl.dataflow.dflow").warning("parsl's own record")
    logging.getLogger("parsl_malleable").info("ours")
    assert stream.getvalue().count("\n") == 1 and "ours" in stream.getvalue()


def test_a_log_file_on_a_full_disk_counts_its_failures_without_a_traceback(
    clean_logger: logging.Logger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a full disk every record printed logging's ``--- Logging error ---`` traceback."""
    full = tmp_path / "run.log"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    handler = parsl_malleable.set_file_logger(full)
    assert isinstance(handler, parsl_malleable.logs.QuietFileHandler)
    log = logging.getLogger("parsl_malleable.campaign.runner")
    log.info("job a done")
    log.warning("job b failed")
    assert handler.failures == 2
    assert capsys.readouterr().err == ""
    # Any other failure (a record that does not fit its message: a bug) is still reported.
    record = log.makeRecord(log.name, logging.INFO, __file__, 1, "two args %s %s", (1,), None)
    try:
        record.getMessage()
    except TypeError:
        handler.handleError(record)
    assert "--- Logging error ---" in capsys.readouterr().err
    parsl_malleable.remove_logger(handler)  # its unwritten buffer: counted, not raised
    assert handler.failures == 3 and capsys.readouterr().err == ""
