"""Send the project's log records somewhere, the way Parsl's ``set_stream_logger`` does.

Every module logs to ``logging.getLogger(__name__)``, under the ``parsl_malleable`` logger, and
nothing is shown until a handler is attached: in a notebook or a Parsl script,
``parsl_malleable.set_stream_logger()`` shows the INFO records (the controller's decisions,
blocks yielding to native jobs) on stderr, which Jupyter prints under the cell.
``set_file_logger(path)`` writes them to a file; a campaign run does that for its
``campaign.log`` and for ``parsl_malleable.log`` in Parsl's run directory (``runinfo/NNN/``),
beside Parsl's own ``parsl.log``.

Unlike Parsl's helpers, these are idempotent: calling one again for the same stream or file
changes the level and format of the handler it attached before instead of adding a second one
(a notebook cell run twice would otherwise print every line twice). A log file that cannot be
written (a full disk) does not print logging's ``--- Logging error ---`` traceback for each
record: :class:`QuietFileHandler` counts the failures instead.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

NAME = "parsl_malleable"
STREAM_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"
FILE_FORMAT = (
    "%(asctime)s %(name)s:%(lineno)d %(processName)s(%(process)d) %(threadName)s "
    "%(levelname)s: %(message)s"
)
_TARGET = "_parsl_malleable_target"  # handler attribute: what it writes to


class QuietFileHandler(logging.FileHandler):
    """A :class:`logging.FileHandler` that counts the records it could not write for an
    ``OSError`` (a full disk, a folder gone) in :attr:`failures`, instead of printing a
    traceback for each on stderr: on a full disk a run's terminal showed them above the one line
    that said what happened. Any other failure (a record whose arguments do not fit its
    message: a bug) is reported as logging reports it."""

    failures = 0

    def handleError(self, record: logging.LogRecord) -> None:
        """Count a write that failed; anything else as :class:`logging.Handler` does."""
        if isinstance(sys.exc_info()[1], OSError):
            self.failures += 1
            return
        super().handleError(record)

    def close(self) -> None:
        """Close the file; what it still held unwritten (a full disk) is dropped and counted,
        not raised into the code that removes the handler at a run's end."""
        try:
            super().close()  # the stream and the handler are closed even when the flush fails
        except OSError:
            self.failures += 1


def _attach(
    logger: logging.Logger,
    target: tuple[str, object],
    make: Callable[[], logging.Handler],
    level: int,
    format_string: str,
) -> logging.Handler:
    handler = next((h for h in logger.handlers if getattr(h, _TARGET, None) == target), None)
    if handler is None:
        handler = make()
        setattr(handler, _TARGET, target)
        logger.addHandler(handler)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(format_string))
    # The logger must let the records through; never raise its threshold (another handler
    # may want DEBUG).
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    return handler


def set_stream_logger(
    name: str = NAME,
    level: int = logging.INFO,
    format_string: str | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Show the records of logger ``name`` (and its children) at ``level`` and above on
    ``stream`` (default: stderr, which a notebook shows under the cell); the handler. Called
    again for the same stream, it updates that handler instead of adding one."""
    out = stream if stream is not None else sys.stderr
    return _attach(
        logging.getLogger(name),
        ("stream", id(out)),
        lambda: logging.StreamHandler(out),
        level,
        format_string or STREAM_FORMAT,
    )


def set_file_logger(
    filename: str | os.PathLike[str],
    name: str = NAME,
    level: int = logging.INFO,
    format_string: str | None = None,
) -> logging.Handler:
    """Append the records of logger ``name`` at ``level`` and above to ``filename`` (created
    private to the user, its folder too); the handler (:func:`remove_logger` takes it off).
    Called again for the same file, it updates that handler instead of adding one."""
    path = Path(filename).resolve()

    def make() -> logging.Handler:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        return QuietFileHandler(path)

    return _attach(
        logging.getLogger(name), ("file", str(path)), make, level, format_string or FILE_FORMAT
    )


def remove_logger(handler: logging.Handler, name: str = NAME) -> None:
    """Detach and close a handler :func:`set_stream_logger` or :func:`set_file_logger` gave."""
    logging.getLogger(name).removeHandler(handler)
    handler.close()


__all__ = ["QuietFileHandler", "remove_logger", "set_file_logger", "set_stream_logger"]
