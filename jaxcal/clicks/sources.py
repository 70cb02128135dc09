"""Where a click model's training log comes from: in memory, files, or the user's chunks.

``Model().fit(source)`` accepts

* a :class:`~jaxcal.clicks.Sessions` (the whole log in memory),
* a path or a list of paths, read chunk by chunk by suffix: ``.parquet`` / ``.pq``
  (:func:`~jaxcal.clicks.iter_parquet`), ``.npz`` (:func:`~jaxcal.clicks.read_npz`, one
  file at a time), and text files ``.txt`` / ``.tsv`` / ``.log``, whose first non-blank
  line tells the format: a JSON list in the third field is TianGong-ST
  (:func:`~jaxcal.clicks.iter_tiangong`), ``Q`` or ``C`` there is Yandex
  (:func:`~jaxcal.clicks.iter_yandex`),
* or a zero-argument callable returning an iterator of :class:`Sessions` chunks (called once
  per pass over the log, that is once per EM iteration unless the fit spills the log).

:func:`chunk_source` turns each into a zero-argument callable of chunks of at most
``chunk_sessions`` SERPs, after checking eagerly what can be checked (the files exist, their
suffixes are known, the callable is callable). Chunks are checked as they arrive; a chunk
that is not a :class:`Sessions` raises a ``ValueError`` naming its position.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from jaxcal.clicks.io import iter_parquet, iter_tiangong, iter_yandex, read_npz
from jaxcal.clicks.io._common import _check_chunk, _check_file
from jaxcal.clicks.sessions import Sessions

__all__ = ["chunk_source", "log_format", "Source"]

#: what ``fit`` accepts as a log
Source = Sessions | str | os.PathLike | list | tuple | Callable[[], Any]

_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".npz": "npz"}
_TEXT_SUFFIXES = (".txt", ".tsv", ".log")


def log_format(path: str | os.PathLike) -> str:
    """``"parquet"``, ``"npz"``, ``"tiangong"`` or ``"yandex"`` for a log file (by suffix;
    text files by their first non-blank line).

    Raises:
        ValueError: on a missing file, an unknown suffix, or a text file that looks like
            neither text format.

    Example:
        >>> from jaxcal.clicks.sources import log_format
        >>> with open("log.txt", "w") as f:
        ...     _ = f.write("7\\t0\\tQ\\t3\\t0\\t11\\t12\\n")
        >>> log_format("log.txt")
        'yandex'
    """
    path = _check_file(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if suffix not in _TEXT_SUFFIXES:
        known = sorted({*_SUFFIXES, *_TEXT_SUFFIXES})
        raise ValueError(f"{path}: unknown log suffix {suffix!r}; expected one of {known}.")
    with open(path, "rb") as fh:
        for raw in fh:
            fields = raw.strip().split(b"\t")
            if fields == [b""]:
                continue
            if len(fields) >= 3 and fields[2].startswith(b"["):
                return "tiangong"
            if len(fields) >= 3 and fields[2] in (b"Q", b"C"):
                return "yandex"
            break
    raise ValueError(
        f"{path}: the first line is neither a TianGong-ST SERP (a JSON list in the third "
        "field) nor a Yandex action (Q or C in the third field)."
    )


def _slices(log: Sessions, size: int) -> Iterator[Sessions]:
    for start in range(0, log.n_sessions, size):
        yield log[start : start + size]


def _file_chunks(path: str, fmt: str, size: int) -> Iterator[Sessions]:
    if fmt == "parquet":
        yield from iter_parquet(path, chunk_sessions=size)
    elif fmt == "npz":
        yield from _slices(read_npz(path), size)
    elif fmt == "tiangong":
        yield from iter_tiangong(path, chunk_sessions=size)
    else:
        yield from iter_yandex(path, chunk_sessions=size)


def _checked(chunks: Any, size: int) -> Iterator[Sessions]:
    """The user's chunks, each checked and cut to at most ``size`` SERPs."""
    try:
        it = iter(chunks)
    except TypeError:
        raise ValueError(
            "the source callable must return an iterator of Sessions chunks; got "
            f"{type(chunks).__name__}."
        ) from None
    for k, chunk in enumerate(it):
        if not isinstance(chunk, Sessions):
            raise ValueError(
                f"chunk {k} of the source is a {type(chunk).__name__}, not a "
                "jaxcal.clicks.Sessions."
            )
        yield from _slices(chunk, size)


def chunk_source(source: Any, *, chunk_sessions: int) -> Callable[[], Iterator[Sessions]]:
    """A zero-argument callable returning the chunks of ``source`` (see the module
    docstring), each of at most ``chunk_sessions`` SERPs.

    Raises:
        ValueError: on a source of another type, an empty list of paths, a missing file or
            an unknown format, or a bad ``chunk_sessions``.

    Example:
        >>> from jaxcal.clicks import Sessions
        >>> from jaxcal.clicks.sources import chunk_source
        >>> log = Sessions.from_arrays([0, 1, 2], [[1], [2], [3]], [[1], [0], [1]])
        >>> chunks = chunk_source(log, chunk_sessions=2)
        >>> [c.n_sessions for c in chunks()], [c.n_sessions for c in chunks()]  # re-readable
        ([2, 1], [2, 1])
    """
    size = _check_chunk(chunk_sessions)
    if isinstance(source, Sessions):
        return lambda: _slices(source, size)
    if isinstance(source, str | os.PathLike):
        source = [source]
    if isinstance(source, list | tuple):
        if not source:
            raise ValueError("the list of log files is empty.")
        bad = [p for p in source if not isinstance(p, str | os.PathLike)]
        if bad:
            raise ValueError(f"log paths must be strings or paths; got {bad[0]!r}.")
        files = [(os.fspath(p), log_format(p)) for p in source]
        return lambda: (c for path, fmt in files for c in _file_chunks(path, fmt, size))
    if callable(source):
        return lambda: _checked(source(), size)
    raise ValueError(
        "the log must be a jaxcal.clicks.Sessions, a path or list of paths (Parquet, npz, "
        "TianGong-ST or Yandex text), or a zero-argument callable returning an iterator of "
        f"Sessions chunks; got {type(source).__name__}."
    )
