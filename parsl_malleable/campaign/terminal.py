"""What of the log a campaign run shows on its terminal, printed through the run's rich console.

A plain :class:`logging.StreamHandler` writes to the terminal behind the live table's back: the
next refresh draws over the line (or the line lands inside the table). Printed with the
console instead, a record goes above the live region, which is drawn again below it.
"""

from __future__ import annotations

import logging

from rich.console import Console
from rich.text import Text

TERMINAL = "terminal"
"""``extra={"terminal": True}`` on an INFO record: the user should see it on the terminal too
(a resume from a checkpoint); without it only warnings and errors reach the terminal."""

_LEVEL_STYLES = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red"}


class ConsoleHandler(logging.Handler):
    """Print each record as one line with ``console``; a warning as ``WARNING logger: message``,
    an INFO record marked :data:`TERMINAL` as its message alone."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)  # with the traceback where one was logged
            if record.levelno >= logging.WARNING:
                style = _LEVEL_STYLES.get(record.levelname, "")
                text = Text.assemble((record.levelname, style), f" {record.name}: {message}")
            else:
                text = Text(message)
            # soft_wrap: the terminal wraps a long line, rich inserts no line breaks (a path
            # in the message stays one string to copy, or to search in a captured stderr).
            self.console.print(text, soft_wrap=True)
        # A handler never raises into the code that logged; rich's answer to a closed pipe is
        # SystemExit, which must not end whichever thread happened to log.
        except (Exception, SystemExit):
            self.handleError(record)


def for_terminal(record: logging.LogRecord) -> bool:
    """Whether ``record`` is shown on the terminal: our warnings and errors, and the INFO records
    marked :data:`TERMINAL`; never Parsl's own (its log is in runinfo/, and an agent task lost
    with its block is an ERROR there, though expected here)."""
    if record.name.startswith("parsl."):
        return False
    return record.levelno >= logging.WARNING or bool(getattr(record, TERMINAL, False))


def terminal_handler(console: Console) -> ConsoleHandler:
    """The handler a run attaches to the root logger for its terminal."""
    handler = ConsoleHandler(console)
    handler.setLevel(logging.INFO)
    handler.addFilter(for_terminal)
    return handler


__all__ = ["TERMINAL", "ConsoleHandler", "for_terminal", "terminal_handler"]
