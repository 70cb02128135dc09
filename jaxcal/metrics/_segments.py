"""Segments of a feature table for the multicalibration error (host side, NumPy).

The segments of Guy et al. (2025) as MCGrad generates them: every feature is reduced to at
most ``max_values`` levels (a categorical feature keeps its ``max_values - 1`` most
frequent values and pools the rest as "other"; a numeric feature is cut into
``max_values`` quantile bins, right-closed, or keeps its values if it has at most
``max_values`` distinct ones; a missing value is a level of its own, which for a numeric
feature does not count towards ``max_values``). A segment fixes the levels of ``depth``
features, for ``depth = 0..max_depth`` (depth 0 is all rows); segments with fewer than
``min_samples`` rows are dropped, and at most ``max_segments`` are kept, in the order of
enumeration: by depth, then by combination of features (categorical features first, each
group in the table's order), then by levels, each feature's levels in the order in which
they first appear along increasing probabilities (MCGrad's order; by code without
probabilities).

Each combination of features is a *partition* of the rows into cells; a segment is a cell
of a partition. The cells are what the jitted core (``_ecce.cell_stats``) works on: one
sort and one scan per partition, however many segments it holds.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np

from jaxcal._features import CATEGORICAL, encode_features, feature_columns

__all__ = ["Partitions", "partitions", "check_segment_options"]


class Partitions(NamedTuple):
    """The partitions of the rows that a feature table defines (host arrays)."""

    cells: np.ndarray  #: ``[P, n]`` int32 cell of each row, cells numbered in enumeration order
    num_cells: int  #: cells in the largest partition
    columns: tuple  #: ``[P]`` tuples of the feature names each partition fixes
    cell_levels: tuple  #: ``[P]`` tuples (one per cell) of the level labels it fixes

    def describe(self, part: int, cell: int) -> str:
        """``"country=fr & age in (31, 45]"`` for a cell (``"all"`` at depth 0)."""
        names, labels = self.columns[part], self.cell_levels[part][cell]
        if not names:
            return "all"
        return " & ".join(_term(c, lab) for c, lab in zip(names, labels, strict=True))


def _term(column: str, label: tuple[str, str]) -> str:
    kind, text = label
    if text == "missing":
        return f"{column} is missing"
    if kind == CATEGORICAL:
        return f"{column}={text}"
    if text.startswith("("):
        return f"{column} in {text}"
    return f"{column} {text}"


def check_segment_options(max_depth, max_values, min_samples, max_segments) -> None:
    """ValueErrors for bad segment options (names as the public functions spell them)."""
    for name, value, low in (
        ("max_depth", max_depth, 0),
        ("max_values_per_feature", max_values, 1),
        ("min_samples", min_samples, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}.")
    if max_segments is not None and (
        isinstance(max_segments, bool)
        or not isinstance(max_segments, int | np.integer)
        or max_segments < 1
    ):
        raise ValueError(f"max_segments must be a positive integer or None; got {max_segments!r}.")


def _first_appearance(codes: np.ndarray, rank: np.ndarray | None, n_levels: int) -> np.ndarray:
    """Position of each code's first row along ``rank`` (``rank[i]``: row ``i``'s position
    in enumeration order), or the code itself without it; ``inf`` for absent codes."""
    first = np.full(n_levels, np.inf)
    if rank is None:
        present = np.bincount(codes, minlength=n_levels) > 0
        first[present] = np.flatnonzero(present)
        return first
    in_order = np.empty_like(codes)
    in_order[rank] = codes
    values, index = np.unique(in_order, return_index=True)
    first[values] = index
    return first


def _levels(codes, kind, labels, max_values, rank):
    """``(level of each row, labels of the levels)`` of one feature: collapsed (categorical)
    and numbered in enumeration order."""
    n_levels = len(labels)
    first = _first_appearance(codes, rank, n_levels)
    present = np.flatnonzero(np.isfinite(first))
    group = np.arange(n_levels)  # what each code becomes before renumbering
    names = list(labels)
    if kind == CATEGORICAL and present.size > max_values:
        counts = np.bincount(codes, minlength=n_levels)
        by_count = present[np.lexsort((first[present], -counts[present]))]
        other = n_levels  # a new code for the pooled values
        group = np.full(n_levels + 1, other)
        group[by_count[: max_values - 1]] = by_count[: max_values - 1]
        names.append("other")
        first = np.append(first, np.min(first[by_count[max_values - 1 :]]))
        present = np.concatenate([by_count[: max_values - 1], [other]])
    ordered = present[np.argsort(first[present], kind="stable")]
    renumber = np.zeros(len(names), np.int64)
    renumber[ordered] = np.arange(ordered.size)
    return renumber[group[codes]], [names[c] for c in ordered]


def partitions(
    features: Any,
    n: int,
    *,
    probs: np.ndarray | None,
    categorical: Any,
    numeric: Any,
    max_depth: int,
    max_values: int,
    name: str = "features",
) -> Partitions:
    """The partitions of ``n`` rows for depths ``0..max_depth`` (see the module docstring)."""
    cols = feature_columns(features, name=name, n=n)
    codes, enc = encode_features(
        cols, categorical=categorical, numeric=numeric, n_bins=int(max_values), name=name
    )
    order = [j for j, k in enumerate(enc.kinds) if k == CATEGORICAL]
    order += [j for j, k in enumerate(enc.kinds) if k != CATEGORICAL]
    rank = None
    if probs is not None:
        rank = np.empty(n, np.int64)
        rank[np.argsort(probs, kind="stable")] = np.arange(n)
    levels, labels = [], []
    for j in order:
        raw = [enc.level_label(j, c) for c in range(enc.n_levels[j])]
        raw[-1] = "missing"  # the reserved code: missing values and unseen categories
        lev, lab = _levels(codes[:, j], enc.kinds[j], raw, int(max_values), rank)
        levels.append(lev)
        labels.append([(enc.kinds[j], text) for text in lab])
    names = [enc.names[j] for j in order]
    cells, columns, cell_levels = [], [], []
    for depth in range(min(int(max_depth), len(order)) + 1):
        for combo in itertools.combinations(range(len(order)), depth):
            sizes = [len(labels[j]) for j in combo]
            ids = np.zeros(n, np.int64)
            for j, size in zip(combo, sizes, strict=True):
                ids = ids * size + levels[j]
            present, dense = _dense(ids, math.prod(sizes))
            cells.append(dense)
            columns.append(tuple(names[j] for j in combo))
            cell_levels.append(
                tuple(
                    tuple(labels[j][k] for j, k in zip(combo, _digits(int(c), sizes), strict=True))
                    for c in present
                )
            )
    num_cells = max(len(c) for c in cell_levels)
    return Partitions(np.stack(cells), num_cells, tuple(columns), tuple(cell_levels))


def _dense(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` for ids in ``0..size-1``, by counting when
    ``size`` is small (int32 codes)."""
    if size > 4 * ids.shape[0] + 1024:
        present, dense = np.unique(ids, return_inverse=True)
        return present, dense.astype(np.int32)
    present = np.flatnonzero(np.bincount(ids, minlength=size))
    remap = np.zeros(size, np.int32)
    remap[present] = np.arange(present.size, dtype=np.int32)
    return present, remap[ids]


def _digits(value: int, sizes: list[int]) -> list[int]:
    """Mixed-radix digits of ``value`` (most significant first)."""
    out = []
    for size in reversed(sizes):
        value, digit = divmod(value, size)
        out.append(digit)
    return out[::-1]


def host_cell_stats(p, y, w, cells, num_cells: int) -> tuple[np.ndarray, ...]:
    """The sums of ``_ecce.cell_stats`` in NumPy float64, for CPU backends: rows sorted by
    increasing ``p``; per partition one stable (radix) sort of the cell ids, one prefix sum
    with each cell's start subtracted (exact enough in float64) and maxima / minima over
    each cell's run. Returns the ``SegmentStats`` fields as ``[P, num_cells]`` arrays."""
    n, n_parts = p.shape[0], cells.shape[0]
    d = w * (y - p)
    values = (w, w * y, w * p, w * w * p * (1.0 - p))
    count = np.zeros((n_parts, num_cells), np.int64)
    out = [np.zeros((n_parts, num_cells)) for _ in range(len(values) + 1)]
    narrow = np.int16 if num_cells < 2**15 else np.int32
    for part in range(n_parts):
        g = cells[part]
        counts = count[part] = np.bincount(g, minlength=num_cells)
        for field, v in zip(out, values, strict=False):
            field[part] = np.bincount(g, weights=v, minlength=num_cells)
        order = np.argsort(g.astype(narrow), kind="stable")  # keeps the probability order
        gs = g[order]
        sums = np.cumsum(d[order])
        starts = np.cumsum(counts) - counts
        full = counts > 0
        before = np.zeros(num_cells)
        before[full] = np.where(starts[full] > 0, sums[np.maximum(starts[full] - 1, 0)], 0.0)
        sums -= np.repeat(before, counts)
        ends = np.ones(n, bool)
        ps = p[order]
        ends[:-1] = (gs[1:] != gs[:-1]) | (ps[1:] != ps[:-1])
        hi = np.maximum.reduceat(np.where(ends, sums, -np.inf), starts[full])
        lo = np.minimum.reduceat(np.where(ends, sums, np.inf), starts[full])
        out[-1][part, full] = np.maximum(hi, 0.0) - np.minimum(lo, 0.0)
    return (count, *out)
