"""Opening trace files (plain or gzip) and the small pieces every reader shares."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO

from parsl_malleable.errors import TraceFormatError

MAX_EXAMPLES = 5  # skipped lines kept verbatim in ReadReport.skipped_examples
# No trace format writes a line this long (an extended-SWF node list of a 10,000-node job is
# under 100 kB): a longer one is a file that is not a trace, refused before it fills memory.
MAX_LINE_CHARS = 1 << 20
CHUNK_CHARS = 1 << 20  # at most MAX_LINE_CHARS: a chunk's inner lines need no length check


GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str | Path) -> bool:
    """Whether the file starts with the gzip magic bytes (names lie: ``x.csv`` may be gzipped)."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_text(path: str | Path, newline: str | None = None) -> IO[str]:
    """Open a text file for reading, gunzipping it when its content is gzip (whatever its name)."""
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline=newline)
    return open(path, encoding="utf-8", errors="replace", newline=newline)


def read_lines(path: str | Path) -> list[str]:
    """All lines of a text trace, gunzipped when it is gzip.

    Read in chunks: a NUL character (a binary or sparse file) or a line longer than
    :data:`MAX_LINE_CHARS` raises :class:`TraceFormatError` naming the line as soon as the
    chunk holding it is read, so such a file never sits whole in memory.
    """
    path = _existing(path)
    lines: list[str] = []
    pending = ""
    try:
        with open_text(path) as fh:
            while chunk := fh.read(CHUNK_CHARS):
                text = pending + chunk
                _check_text(path, text, len(lines))
                # only the first line of text can be longer than a chunk
                first = text.find("\n")
                if (first if first >= 0 else len(text)) > MAX_LINE_CHARS:
                    raise TraceFormatError(path, len(lines) + 1, _too_long())
                # universal newlines turned every line end into "\n": a cut after the last one
                # splits the text exactly where splitlines() of the whole file would
                cut = text.rfind("\n") + 1
                lines += text[:cut].splitlines()
                pending = text[cut:]
    except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
        raise TraceFormatError(path, None, f"cannot read: {exc}") from None
    except MemoryError:
        raise TraceFormatError(
            path, None, f"too large to read into memory ({path.stat().st_size:,} bytes)"
        ) from None
    return lines + pending.splitlines()


def head_lines(path: str | Path, count: int) -> list[str]:
    """The first ``count`` lines (with their line ends), checked as :func:`read_lines` does."""
    path = _existing(path)
    lines: list[str] = []
    try:
        with open_text(path) as fh:
            while len(lines) < count and (line := fh.readline(MAX_LINE_CHARS + 1)):
                _check_text(path, line, len(lines))
                if len(line) > MAX_LINE_CHARS:
                    raise TraceFormatError(path, len(lines) + 1, _too_long())
                lines.append(line)
    except (OSError, EOFError) as exc:  # gzip magic on a file that is not gzip, or cut short
        raise TraceFormatError(path, None, f"cannot read: {exc}") from None
    return lines


def check_text_file(path: str | Path) -> None:
    """Refuse a file with NUL characters or overlong lines, reading it in bounded chunks.

    For readers that hand the whole file to a parser (pandas) that would otherwise load a
    binary or sparse file into memory before failing on it.
    """
    path = _existing(path)
    line, since_newline = 0, 0
    try:
        with open_text(path) as fh:
            while chunk := fh.read(CHUNK_CHARS):
                _check_text(path, chunk, line)
                first = chunk.find("\n")
                if since_newline + (first if first >= 0 else len(chunk)) > MAX_LINE_CHARS:
                    raise TraceFormatError(path, line + 1, _too_long())
                if first >= 0:
                    line += chunk.count("\n")
                    since_newline = len(chunk) - chunk.rfind("\n") - 1
                else:
                    since_newline += len(chunk)
    except (OSError, EOFError) as exc:
        raise TraceFormatError(path, None, f"cannot read: {exc}") from None


def example(path: str | Path, lineno: int, text: str, why: str) -> str:
    """One ``skipped_examples`` entry: where, why, and the line itself (shortened)."""
    short = text if len(text) <= 120 else text[:117] + "..."
    return f"{Path(path).name}:{lineno}: {why}: {short}"


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, None, "no such file")
    return path


def _check_text(path: Path, text: str, lines_before: int) -> None:
    """Refuse ``text`` (which starts a line after ``lines_before`` lines) if it holds a NUL."""
    nul = text.find("\x00")
    if nul >= 0:
        line = lines_before + text.count("\n", 0, nul) + 1
        raise TraceFormatError(
            path, line, "NUL byte: this is not a text trace (a binary, sparse or damaged file)"
        )


def _too_long() -> str:
    return f"a line longer than {MAX_LINE_CHARS:,} characters: this is not a trace"
