"""Minimal progress reporting for long-running commands (stderr; no extra dependency)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

__all__ = ["progress", "log"]


def log(message: str, *, quiet: bool = False) -> None:
    """Print one progress line to stderr (flushed), unless ``quiet``."""
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def progress(
    items: Iterable[T], desc: str, *, total: int | None = None, quiet: bool = False
) -> Iterator[T]:
    """Yield ``items``, printing ``desc: k/total [elapsed]`` after each one."""
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    start = time.perf_counter()
    for k, item in enumerate(items, 1):
        yield item
        elapsed = time.perf_counter() - start
        log(f"{desc}: {k}/{total if total is not None else '?'} [{elapsed:.1f}s]", quiet=quiet)
