"""Data the project carries: real job traces and the FreeTrain/BFTrainer workloads, compressed.

The files ship inside the package (so they are there after ``pip install`` as well as in a
checkout); ``README.md`` in this folder lists each one with its source and terms of use.

>>> from parsl_malleable import data
>>> from parsl_malleable.traces import read_trace
>>> trace = read_trace(data.path("theta_2022.swf.gz"))  # doctest: +SKIP

Files are found by name anywhere under the data folder (``traces/``, ``bftrainer/``); a name
without its compression suffix (``theta_2022.swf``) finds the compressed file.
"""

from __future__ import annotations

from pathlib import Path

COMPRESSED_SUFFIXES = (".gz", ".xz")
_DATA = Path(__file__).resolve().parent


def data_dir() -> Path:
    """The folder holding the carried data (``traces/``, ``bftrainer/`` and ``README.md``)."""
    return _DATA


def files() -> list[str]:
    """Names of every carried data file (``traces/theta_2022.swf.gz``, ...), sorted."""
    return sorted(
        p.relative_to(_DATA).as_posix()
        for p in _DATA.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and p.name != "README.md"
    )


def path(name: str) -> Path:
    """The carried file ``name``: a bare file name (``hpc2n.swf.gz``) or one relative to the
    data folder (``traces/hpc2n.swf.gz``); ``hpc2n.swf`` finds ``hpc2n.swf.gz``.

    Raises :class:`FileNotFoundError` naming the carried files when there is no such file.
    """
    wanted = [name, *(name + suffix for suffix in COMPRESSED_SUFFIXES)]
    for candidate in wanted:
        direct = _DATA / candidate
        if direct.is_file():
            return direct
    known = files()
    for candidate in wanted:
        matches = [rel for rel in known if rel.rsplit("/", 1)[-1] == candidate]
        if matches:
            return _DATA / matches[0]
    raise FileNotFoundError(
        f"no carried data file {name!r} in {_DATA}; carried: {', '.join(known)}"
    )


__all__ = ["data_dir", "files", "path"]
