"""What the click-log readers share: the read report, the chunk iterator, line decoding and
the errors that name the file and line."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator

import numpy as np

from jaxcal.clicks.sessions import Sessions

_MAX_INT64 = 2**63 - 1
_UNSHOWN_POLICIES = ("warn", "count", "error")
#: how many line numbers of unshown clicks a report keeps
_KEEP_LINES = 10
_SCAN_JSON = json.JSONDecoder().scan_once


class UnshownClickWarning(UserWarning):
    """A Yandex log holds clicks on URLs that no result page of their session showed
    (they are left out of the log; the warning gives their number and first lines).

    Example:
        >>> import warnings
        >>> from jaxcal.clicks import UnshownClickWarning, read_yandex
        >>> with open("log.txt", "w") as f:
        ...     _ = f.write("7\\t0\\tQ\\t3\\t0\\t11\\t12\\n7\\t9\\tC\\t99\\n")  # URL 99 not shown
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     log = read_yandex("log.txt")
        >>> [w.category is UnshownClickWarning for w in caught]
        [True]
    """


@dataclasses.dataclass
class ReadReport:
    """What a text reader did with every line of one file.

    Every line is accounted for: ``lines == blank_lines + serps + click_lines``, and for
    Yandex logs ``click_lines == clicks + repeated_clicks + unshown_clicks``.

    Attributes:
        path: the file.
        lines: lines read.
        blank_lines: empty or whitespace-only lines (skipped).
        serps: result pages read (rows of the returned :class:`Sessions`).
        clicks: clicks in the returned log.
        search_sessions: search sessions (Yandex; ``None`` for TianGong files, whose
            lines are SERPs).
        click_lines: click lines (Yandex; 0 for TianGong files, whose clicks are on the
            SERP line).
        repeated_clicks: Yandex clicks on a result already clicked on the same SERP
            (counted once in the log: clicks are binary).
        unshown_clicks: Yandex clicks on a URL that no SERP of the session showed up to
            that line (left out of the log).
        unshown_click_lines: the line numbers of the first 10 of them.

    Example:
        >>> from jaxcal.clicks import read_tiangong
        >>> with open("log.txt", "w") as f:
        ...     _ = f.write("1\\t5\\t[11, 12]\\t[0, 0]\\t[1, 0]\\n\\n2\\t6\\t[13]\\t[0]\\t[0]\\n")
        >>> log, report = read_tiangong("log.txt", return_report=True)
        >>> report.lines, report.blank_lines, report.serps, report.clicks
        (3, 1, 2, 1)
    """

    path: str
    lines: int = 0
    blank_lines: int = 0
    serps: int = 0
    clicks: int = 0
    search_sessions: int | None = None
    click_lines: int = 0
    repeated_clicks: int = 0
    unshown_clicks: int = 0
    unshown_click_lines: list[int] = dataclasses.field(default_factory=list)


class LogChunks(Iterator[Sessions]):
    """The chunks of :func:`iter_yandex` / :func:`iter_tiangong`: an iterator of
    :class:`Sessions` whose :attr:`report` (a :class:`ReadReport`) counts what has been
    read so far (complete once the iterator is exhausted).

    Example:
        >>> from jaxcal.clicks import iter_tiangong
        >>> with open("log.txt", "w") as f:
        ...     _ = f.write("".join(f"{i}\\t{i}\\t[1, 2]\\t[0, 0]\\t[0, 1]\\n" for i in range(5)))
        >>> chunks = iter_tiangong("log.txt", chunk_sessions=2)
        >>> [c.n_sessions for c in chunks], chunks.report.serps
        ([2, 2, 1], 5)
    """

    def __init__(self, chunks: Iterator[Sessions], report: ReadReport):
        self._chunks = chunks
        self.report = report

    @classmethod
    def _of_file(cls, read_chunks: Callable, path, chunk_sessions: int) -> LogChunks:
        """The chunks ``read_chunks(path, chunk_sessions, report)`` of a text log (a reader's
        generator), after checking ``chunk_sessions`` and the file."""
        chunk_sessions = _check_chunk(chunk_sessions)
        path = _check_file(path)
        report = ReadReport(path)
        return cls(read_chunks(path, chunk_sessions, report), report)

    def _concatenate(self, return_report: bool):
        """The remaining chunks as one :class:`Sessions` (and the report if
        ``return_report``)."""
        log = Sessions.concatenate(list(self))
        return (log, self.report) if return_report else log

    def __iter__(self) -> LogChunks:
        return self

    def __next__(self) -> Sessions:
        return next(self._chunks)

    def close(self) -> None:
        """Stop reading (closes the file).

        Example:
            >>> from jaxcal.clicks import iter_tiangong
            >>> with open("log.txt", "w") as f:
            ...     _ = f.write("".join(f"{i}\\t{i}\\t[1]\\t[0]\\t[1]\\n" for i in range(4)))
            >>> chunks = iter_tiangong("log.txt", chunk_sessions=1)
            >>> first = next(chunks)
            >>> chunks.close()  # the rest is not read
            >>> chunks.report.serps, next(chunks, None) is None
            (1, True)
        """
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


def _pack(rows: list[tuple[int, list[int], list[int]]]) -> Sessions:
    n = max(len(d) for _, d, _ in rows)
    S = len(rows)
    query = np.empty(S, np.int64)
    doc = np.zeros((S, n), np.int64)
    clicks = np.zeros((S, n), np.int8)
    mask = np.zeros((S, n), bool)
    for i, (q, d, c) in enumerate(rows):
        query[i] = q
        k = len(d)
        doc[i, :k] = d
        clicks[i, :k] = c
        mask[i, :k] = True
    return Sessions.from_arrays(query, doc, clicks, mask)


def _check_chunk(chunk_sessions: int) -> int:
    if isinstance(chunk_sessions, bool) or int(chunk_sessions) < 1:
        raise ValueError(f"chunk_sessions must be a positive integer; got {chunk_sessions!r}.")
    return int(chunk_sessions)


def _check_file(path) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    return path


def _decode(raw: bytes, path: str, lineno: int) -> str:
    """One line as UTF-8 text (a byte-order mark at the start of the file is dropped)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start]
        raise _error(
            path, lineno, f"not UTF-8 text (byte {byte:#04x} at column {exc.start + 1})."
        ) from None
    return line[1:] if lineno == 1 and line.startswith("\ufeff") else line


def _numbered(path: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of every line of a file (decoded by the caller)."""
    with open(path, "rb") as fh:
        yield from enumerate(fh, 1)


def _error(path: str, lineno: int, message: str) -> ValueError:
    return ValueError(f"{path}:{lineno}: {message}")


def _short(values: list[int]) -> str:
    text = str(values)
    return text if len(text) <= 80 else text[:76] + " ..."


def _uint(token: str, what: str, upper: int, path: str, lineno: int) -> int:
    """A non-negative decimal integer up to ``upper`` (ASCII digits only)."""
    if token.isdigit() and token.isascii():
        if len(token) <= 20:
            v = int(token)
            if v <= upper:
                return v
        raise _error(path, lineno, f"{what} {token[:30]} is too large (at most {upper}).")
    raise _error(path, lineno, f"{what} must be a non-negative integer; got {token[:80]!r}.")


class _SeenIds:
    """A set of non-negative integer ids in sorted NumPy blocks (8 bytes an id, so that
    the session ids of a whole log fit in memory); a new id above every id seen so far
    (ordered logs) is recognised without a search."""

    def __init__(self) -> None:
        self.max = -1
        self.recent: set[int] = set()
        self.blocks: list[np.ndarray] = []  # sorted, sizes non-increasing

    def add(self, x: int) -> None:
        self.recent.add(x)
        self.max = max(self.max, x)
        if len(self.recent) >= 4096:
            block = np.sort(np.fromiter(self.recent, np.int64, len(self.recent)))
            self.recent = set()
            while self.blocks and self.blocks[-1].size <= block.size:
                block = np.sort(np.concatenate([self.blocks.pop(), block]), kind="mergesort")
            self.blocks.append(block)

    def __contains__(self, x: int) -> bool:
        if x > self.max:
            return False
        if x in self.recent:
            return True
        for block in self.blocks:
            i = int(np.searchsorted(block, x))
            if i < block.size and block[i] == x:
                return True
        return False


def _check_policy(on_unshown_click: str) -> str:
    if on_unshown_click not in _UNSHOWN_POLICIES:
        raise ValueError(
            f"on_unshown_click must be one of {_UNSHOWN_POLICIES}; got {on_unshown_click!r}."
        )
    return on_unshown_click
