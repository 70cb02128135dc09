"""Counts by distinct score from data that streams, and merged across processes.

:func:`from_chunks` builds :class:`~jaxcal.fitting.score_counts.ScoreCounts` chunk by chunk
(memory: one chunk and the counts so far), and :func:`across_processes` unites the counts of
every process of a ``jax.distributed`` job: distinct float64 scores are united bit for bit as
order-preserving int64 keys (:func:`order_keys`) through
:func:`jaxcal.distributed.process_union`, and the statistics per score summed with
:func:`jaxcal.distributed.process_sum`, so every process ends with the counts of the union of
the data (module docstring of :mod:`jaxcal.fitting.score_counts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from jaxcal import distributed
from jaxcal.fitting.score_counts import (
    _MASK,
    ScoreCounts,
    _bin_ids,
    _reduce,
    check_edges,
    merge,
    score_counts,
)

__all__ = ["from_chunks", "across_processes", "order_keys", "from_order_keys"]


def _chunk_iterator(source: Any) -> Iterator[Any]:
    """The chunks of ``source``: an iterable, or a zero-argument callable returning one."""
    if callable(source) and not isinstance(source, Iterable):
        source = source()
    try:
        return iter(source)
    except TypeError:
        raise ValueError(
            "the source must be an iterable of (scores, labels[, sample_weight]) chunks or a "
            f"zero-argument callable returning one; got {type(source).__name__}."
        ) from None


def _chunk_counts(chunk: Any, k: int, edges: np.ndarray | None, loss: str) -> ScoreCounts | None:
    """Counts of chunk ``k`` (``None`` for an empty chunk)."""
    if not isinstance(chunk, tuple | list) or len(chunk) not in (2, 3, 4):
        raise ValueError(
            f"chunk {k} of the source must be a tuple (scores, labels[, sample_weight[, "
            f"propensity]]); got {type(chunk).__name__}"
            + (f" of length {len(chunk)}." if isinstance(chunk, tuple | list) else ".")
        )
    scores, labels, *rest = chunk
    weight = rest[0] if rest else None
    propensity = rest[1] if len(rest) > 1 else None
    try:
        if np.size(scores) == 0 and np.size(labels) == 0:
            return None
        return score_counts(scores, labels, weight, propensity=propensity, loss=loss, bins=edges)
    except ValueError as exc:
        raise ValueError(f"chunk {k} of the source: {exc}") from None


def from_chunks(source: Any, *, bins: ArrayLike | None = None, loss: str = "naive") -> ScoreCounts:
    """Counts of data that arrives in chunks, one pass, in memory of the order of the
    distinct scores (exact) or of the bins (quantised).

    Args:
        source: an iterable of chunks ``(scores, labels)``, ``(scores, labels,
            sample_weight)`` or ``(scores, labels, sample_weight, propensity)``
            (``sample_weight`` may be ``None``), or a zero-argument callable returning an
            iterator of them (called once), as the click models' sources
            (``jaxcal.clicks.sources``). Empty chunks are skipped.
        bins: ``None`` (exact counts) or the edges of one fixed grid (quantised counts, module
            docstring); every chunk is quantised as it arrives.
        loss: the loss weighting the counts hold (:func:`score_counts`; ``"ips"`` and
            ``"ips_positive"`` need every chunk's propensities).

    Returns:
        The merged :class:`ScoreCounts` of every chunk.

    Raises:
        ValueError: a source of another type, a malformed or invalid chunk (named by its
            position), no data at all, or bad ``bins``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.fitting.streamed_counts import from_chunks
        >>> rng = np.random.default_rng(0)
        >>> chunks = [(rng.uniform(size=100), rng.integers(0, 2, 100)) for _ in range(5)]
        >>> from_chunks(chunks).count.sum()
        np.int64(500)
    """
    edges = None if bins is None else check_edges(bins)
    merged: ScoreCounts | None = None
    pending: list[ScoreCounts] = []
    pending_size = 0
    for k, chunk in enumerate(_chunk_iterator(source)):
        part = _chunk_counts(chunk, k, edges, loss)
        if part is None:
            continue
        pending.append(part)
        pending_size += part.scores.shape[0]
        # merge when the pending parts outgrow the merged counts: each entry is re-sorted
        # O(log(chunks)) times in all
        if merged is None or pending_size >= merged.scores.shape[0]:
            merged = merge(*([] if merged is None else [merged]), *pending)
            pending, pending_size = [], 0
    if merged is None:
        raise ValueError("the source gave no data (no chunk, or only empty chunks).")
    return merge(merged, *pending)


# --------------------------------------------------------------------- across processes


def order_keys(x: np.ndarray) -> np.ndarray:
    """int64 keys with the order of the float64 values ``x`` (``-0.0`` keys as ``0.0``);
    :func:`from_order_keys` inverts them bit for bit."""
    bits = np.ascontiguousarray(x, np.float64).view(np.int64)
    bits = np.where(bits == np.iinfo(np.int64).min, 0, bits)
    return bits ^ ((bits >> 63) & _MASK)


def from_order_keys(keys: np.ndarray) -> np.ndarray:
    """The float64 values of :func:`order_keys`."""
    keys = np.ascontiguousarray(keys, np.int64)
    return (keys ^ ((keys >> 63) & _MASK)).view(np.float64)


def _check_same_grid(counts: ScoreCounts) -> None:
    """``ValueError`` on every process unless all hold exact counts, or all hold counts
    quantised on the same edges (collective: every process calls it)."""
    n = distributed.process_count()
    kinds = int(distributed.process_sum(np.asarray(int(counts.quantized), np.int64)))
    if kinds not in (0, n):
        raise ValueError(
            "across_processes: some processes hold exact counts and others quantised ones; "
            "quantise on every process with the same edges."
        )
    if not kinds:
        return
    keys = order_keys(counts.edges)
    same = np.array_equal(distributed.process_union(keys), np.unique(keys))
    if int(distributed.process_sum(np.asarray(int(same), np.int64))) != n:
        raise ValueError(
            "across_processes: the processes quantised their counts on different grids; "
            "pass the same edges on every process."
        )


def across_processes(counts: ScoreCounts) -> ScoreCounts:
    """The counts of the data of every process of a ``jax.distributed`` job, on every
    process (collective: every process calls it, in the same order as the other collective
    calls). The distinct scores are united bit for bit; the sums per score are added in
    process order (:func:`jaxcal.distributed.process_sum`), so every process gets identical
    counts. In a single process it returns ``counts``.

    Raises:
        ValueError: (on every process) when some processes hold exact counts and others
            quantised ones, or the grids differ.
    """
    if not isinstance(counts, ScoreCounts):
        raise ValueError(f"across_processes needs a ScoreCounts; got {type(counts).__name__}.")
    if distributed.process_count() == 1:
        return counts
    _check_same_grid(counts)
    keys = order_keys(counts.scores)
    union = distributed.process_union(keys)
    at = np.searchsorted(union, keys)

    def dense(a, dtype):
        out = np.zeros(union.shape[0], dtype)
        out[at] = a
        return out

    # targets other than the labels on any process: every process sums targets
    targets = int(distributed.process_sum(np.asarray(counts.target_sum is not None, np.int64)))
    parts = {
        "count": dense(counts.count, np.int64),
        "weight": dense(counts.weight, np.float64),
        "label_sum": dense(counts.label_sum, np.float64),
        "label_variance": np.asarray(counts.label_variance, np.float64),
    }
    if targets:
        parts["target_sum"] = dense(counts.targets, np.float64)
    sums = distributed.process_sum(parts)
    if targets:
        top = -np.inf if counts.target_max is None else float(counts.target_max)
        sums["target_max"] = np.asarray(distributed.process_max(top), np.float64)
    scores = from_order_keys(union)
    if not counts.quantized:
        return ScoreCounts(scores=scores, **sums)
    # per bin, the smallest score is the first of the united smallest scores in it (the
    # reduction below), the largest the last of the united largest scores in it
    merged = _reduce(
        scores,
        sums["count"],
        sums["weight"],
        sums["label_sum"],
        float(sums["label_variance"]),
        None,
        counts.edges,
        sums.get("target_sum"),
        sums.get("target_max"),
    )
    tops = from_order_keys(distributed.process_union(order_keys(counts.score_max)))
    top_ids = _bin_ids(tops, counts.edges)
    last = np.searchsorted(top_ids, _bin_ids(merged.scores, counts.edges), side="right") - 1
    return dataclasses.replace(merged, score_max=tops[last])
