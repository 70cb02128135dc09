r"""Counts by distinct score: what isotonic calibration and the score metrics need of the data,
built from chunks that stream and merged across the processes of a ``jax.distributed`` job.

For scores :math:`s_i`, labels :math:`y_i \in [0, 1]` and weights :math:`w_i \ge 0`, a
:class:`ScoreCounts` holds, for every distinct score :math:`v` (sorted), the number of samples
:math:`n_v`, the total weight :math:`W_v = \sum_{s_i = v} w_i` and the weighted label sum
:math:`Y_v = \sum_{s_i = v} w_i y_i`, and one scalar :math:`V = \sum_i w_i y_i (1 - y_i)`
(0 for 0/1 labels). Tied scores share one fitted value, so the weighted least-squares
objective of isotonic regression is

.. math::  \sum_i w_i (y_i - f(s_i))^2 = \sum_v W_v \bigl(f(v) - Y_v / W_v\bigr)^2
    + \text{const},

a function of :math:`(v, W_v, Y_v)` alone; so are the AUC, the log loss and the binned ECE,
and the Brier score needs :math:`V` besides. The statistics are sums over the data, so they
stream (:func:`~jaxcal.fitting.streamed_counts.from_chunks`) and merge (:func:`merge`,
:func:`~jaxcal.fitting.streamed_counts.across_processes`) exactly: any
split of the data gives the same distinct scores, bit for bit, and the same sums up to the
float64 rounding of the additions (none with integer weights).

**Loss weightings** (``score_counts(..., propensity=..., loss=...)``, ``jaxcal.losses``).
``loss="ips_positive"`` only re-weights (:math:`w = v (Y / \omega + 1 - Y)`), so its counts
are those of the re-weighted labels. ``loss="ips"`` fits the targets :math:`t = Y / \omega`,
which leave [0, 1]: the counts then hold the target sums :math:`T_v = \sum_{s_i = v} w_i t_i`
(``target_sum``) besides the label sums, which the metrics and the check for both classes
use, and the largest target (``target_max``). ``loss="snips"`` normalises by sums over all
the data, which no chunk holds, and is refused.

**Quantised counts.** Continuous scores have about as many distinct values as samples. Over a
grid of edges :math:`e_0 \le \dots \le e_B` (bin :math:`k` is :math:`[e_k, e_{k+1})`, scores
below :math:`e_1` in the first bin and at or above :math:`e_{B-1}` in the last, as
:func:`jaxcal.metrics.calibration.binned_stats` bins), :func:`quantize` (or ``bins=`` in
:func:`score_counts` and ``from_chunks``) keeps one entry per non-empty bin: its sums, its
smallest score (``scores``) and its largest (``score_max``). The isotonic fit on quantised
counts (:func:`jaxcal.calibrators.isotonic_counts.fit_counts`) is the best monotone map that
is constant on each bin's range :math:`[\min_k, \max_k]`; memory is one entry per bin
whatever the number of samples, and merging on one grid stays exact.

**The bound.** Let :math:`f` be the exact isotonic fit and :math:`g` the quantised one, both
at the training points, :math:`L` the weighted squared error, :math:`W_k` bin :math:`k`'s
weight, :math:`W` the total and :math:`K'` the bins holding two or more distinct scores.
For labels in [0, 1],

.. math::  \frac{1}{W} \sum_i w_i (g_i - f_i)^2 \;\le\; \frac{L(g) - L(f)}{W}
    \;\le\; \frac{2 \max_{k \in K'} W_k}{W},

the right-hand side being :attr:`ScoreCounts.quantization_bound`. For targets in
:math:`[0, T]` with :math:`T > 1` (the inverse-propensity targets :math:`Y / \omega` of
``loss="ips"``; the counts record :math:`T` as ``target_max``) the bound is
:math:`2 \max(1, T) \max_{k \in K'} W_k / W`.

Proof. :math:`f` is the :math:`w`-weighted projection of :math:`y` onto the closed convex
cone :math:`C` of vectors monotone in the score (tied scores equal), and :math:`g \in C` (bins
are intervals of scores), so :math:`\langle y - f, g - f\rangle_w \le 0` and
:math:`L(g) = L(f) + \|g - f\|_w^2 - 2\langle y - f, g - f\rangle_w \ge L(f) + \|g - f\|_w^2`.
For the second inequality, :math:`g` minimises :math:`L` over the monotone bin-constant
vectors, and :math:`h`, :math:`f` at the right end of each bin (its largest score), is one,
so :math:`L(g) - L(f) \le L(h) - L(f) = \sum_i w_i (f_i - h_i)(2 y_i - f_i - h_i)`. Every
factor :math:`|2 y_i - f_i - h_i| \le 2` (labels and fitted values lie in [0, 1]; for targets
in :math:`[0, T]` the factor lies in :math:`[-2, 2T]`, so :math:`\le 2 \max(1, T)`) and
:math:`0 \le h_i - f_i \le` the rise of :math:`f` inside bin :math:`k`, which is 0 unless
:math:`k \in K'` (ties share a value); the rises inside disjoint bins add up to at most 1.
Hence :math:`L(h) - L(f) \le 2 \sum_{k \in K'} W_k\,\mathrm{rise}_k \le 2 \max_{k \in K'} W_k`.
The same argument holds for a decreasing map (rises become falls) and for fits clipped to
:math:`[lo, hi] \subseteq [0, 1]` (both are then projections onto closed convex sets, and
:math:`h` stays in the bounded set). With equal-weight bins, :math:`\max W_k / W` is about
:math:`1 / B`: 4096 bins bound the mean squared difference by about ``5e-4``.

Across processes, :func:`jaxcal.fitting.streamed_counts.across_processes` unites the
distinct float64 scores of every process bit for bit (as order-preserving int64 keys,
through :func:`jaxcal.distributed.process_union`) and sums the statistics per score
(:func:`jaxcal.distributed.process_sum`), so every process ends with the counts of the union
of the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from jaxcal._lazy import lazy_method
from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_1d, check_propensity, check_scores
from jaxcal.losses import check_loss

__all__ = ["ScoreCounts", "score_counts", "merge", "quantize", "check_edges"]

_MASK = np.int64(np.iinfo(np.int64).max)


@pytree_dataclass
class ScoreCounts:
    r"""Sums of weights and labels by distinct score (module docstring): exact, or quantised
    to a grid of bins.

    Build them with :func:`score_counts`, :func:`from_chunks` or :func:`quantize`; combine
    them with :func:`merge` (``a.merge(b)``, :meth:`concatenate`) and
    :func:`across_processes`. NumPy arrays on the host (float64 / int64), whatever JAX's
    precision.

    Attributes:
        scores: ``[m]`` strictly increasing distinct scores (quantised: each non-empty bin's
            smallest score).
        count: ``[m]`` int64 number of samples per entry (zero-weight samples included).
        weight: ``[m]`` total weight :math:`W_v` per entry.
        label_sum: ``[m]`` weighted label sum :math:`Y_v` per entry.
        label_variance: ``[]`` :math:`\sum_i w_i y_i (1 - y_i)` over all samples (0 for
            0/1 labels; the Brier score's part that per-score sums do not hold).
        score_max: ``None`` (exact counts), or ``[m]`` each bin's largest score.
        edges: ``None`` (exact counts), or the ``[B + 1]`` non-decreasing edges of the grid.
        target_sum: ``None`` (the targets are the labels), or ``[m]`` the weighted sums
            :math:`T_v = \sum_{s_i = v} w_i t_i` of targets that are not the labels: the
            inverse-propensity targets :math:`t = Y / \omega` of ``loss="ips"``.
        target_max: ``None`` (targets in [0, 1]), or ``[]`` the largest target of a sample
            with positive weight (the factor of the quantisation bound).

    Example:
        >>> from jaxcal.calibrators import ScoreCounts
        >>> from jaxcal.fitting.score_counts import score_counts
        >>> a = score_counts([0.2, 0.5, 0.2], [0, 1, 1])
        >>> b = score_counts([0.5, 0.9], [1, 0])
        >>> both = a.merge(b)  # the counts of the two chunks together
        >>> isinstance(both, ScoreCounts), both.scores.tolist(), both.label_sum.tolist()
        (True, [0.2, 0.5, 0.9], [1.0, 2.0, 0.0])
    """

    scores: np.ndarray
    count: np.ndarray
    weight: np.ndarray
    label_sum: np.ndarray
    label_variance: np.ndarray
    score_max: np.ndarray | None = None
    edges: np.ndarray | None = None
    target_sum: np.ndarray | None = None
    target_max: np.ndarray | None = None

    @property
    def quantized(self) -> bool:
        """Whether the counts are quantised to a grid (``edges`` is set)."""
        return self.edges is not None

    @property
    def total_weight(self) -> float:
        """:math:`W`, the total weight."""
        return float(np.sum(self.weight))

    @property
    def targets(self) -> np.ndarray:
        """``[m]`` the weighted target sums of the fits: ``target_sum``, or the label sums."""
        return self.label_sum if self.target_sum is None else self.target_sum

    @property
    def quantization_bound(self) -> float:
        r""":math:`2 \max(1, T) \max_{k \in K'} W_k / W` (module docstring; :math:`T` the
        largest target, 1 for labels): a bound on the weighted mean squared difference
        between the isotonic fit on these counts and the exact one at the training points,
        and on its excess mean squared error; 0 for exact counts and for grids whose bins
        each hold one distinct score."""
        if self.score_max is None:
            return 0.0
        mixed = self.weight[self.score_max > self.scores]
        total = self.total_weight
        if not mixed.size or total <= 0:
            return 0.0
        top = 1.0 if self.target_max is None else max(1.0, float(self.target_max))
        return float(2.0 * top * mixed.max() / total)

    def merge(self, *others: ScoreCounts) -> ScoreCounts:
        """:func:`merge` of these counts and ``others``."""
        return merge(self, *others)

    @classmethod
    def concatenate(cls, parts: Iterable[ScoreCounts]) -> ScoreCounts:
        """:func:`merge` of a sequence of counts (at least one)."""
        return merge(*parts)

    #: :func:`jaxcal.fitting.streamed_counts.from_chunks` (called on the class)
    from_chunks = lazy_method("jaxcal.fitting.streamed_counts", "from_chunks")
    #: :func:`jaxcal.fitting.streamed_counts.across_processes` of these counts
    across_processes = lazy_method("jaxcal.fitting.streamed_counts", "across_processes")

    def quantize(self, bins: int | ArrayLike) -> ScoreCounts:
        """:func:`quantize` of these counts."""
        return quantize(self, bins)

    def _check_loaded(self) -> None:
        m = np.shape(self.scores)[0] if np.ndim(self.scores) == 1 else -1
        arrays = (self.count, self.weight, self.label_sum)
        arrays += () if self.score_max is None else (self.score_max,)
        arrays += () if self.target_sum is None else (self.target_sum,)
        if m < 0 or any(np.shape(a) != (m,) for a in arrays):
            raise ValueError("ScoreCounts arrays must be 1-D of one length.")
        if (self.score_max is None) != (self.edges is None):
            raise ValueError("quantised ScoreCounts need both score_max and edges.")
        if (self.target_sum is None) != (self.target_max is None):
            raise ValueError("ScoreCounts need both target_sum and target_max, or neither.")


# ------------------------------------------------------------------------ validation


def _check_labels(labels: Any, n: int) -> np.ndarray:
    """Finite labels in [0, 1] (0/1 labels, or fractions such as averaged clicks)."""
    y = check_1d(labels, "labels", allow_empty=True)
    if y.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {y.shape[0]} labels.")
    bad = ~((y >= 0.0) & (y <= 1.0))  # NaN is bad too
    if bad.any():
        shown = ", ".join(repr(v) for v in np.unique(y[bad])[:5].tolist())
        raise ValueError(
            f"labels must lie in [0, 1] (0/1 labels or fractions); got {int(bad.sum())} "
            f"value(s) outside, e.g. {{{shown}}}."
        )
    return y


def _check_weights(sample_weight: Any, n: int) -> np.ndarray:
    """Finite non-negative weights (``None``: ones). A chunk whose weights are all zero is
    accepted; a fit or metric checks that the total is positive."""
    if sample_weight is None:
        return np.ones(n)
    w = check_1d(sample_weight, "sample_weight", allow_empty=True)
    if w.shape[0] != n:
        raise ValueError(f"length mismatch: {n} scores but {w.shape[0]} sample_weight.")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ValueError(
            "sample_weight must be finite and non-negative; got "
            f"{int((~(np.isfinite(w) & (w >= 0))).sum())} other value(s)."
        )
    return w


def check_edges(bins: Any) -> np.ndarray:
    """A grid of bin edges: 1-D, finite, non-decreasing, at least two (one bin)."""
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        raise ValueError(
            f"bins={bins!r}: a number of bins places its edges from the data, which chunks "
            "and processes do not share; pass the edges of one fixed grid (e.g. "
            "np.linspace(0, 1, 4097)), or quantize(counts, n_bins) the merged exact counts."
        )
    e = check_scores(bins, name="bins")
    if e.shape[0] < 2 or np.any(np.diff(e) < 0):
        raise ValueError(
            f"bins must hold at least two non-decreasing edges; got {e.shape[0]} edge(s)"
            + ("." if e.shape[0] < 2 else ", not in order.")
        )
    return e + 0.0


def check_counts(counts: Any, *, what: str) -> ScoreCounts:
    """``counts`` if it is a non-empty :class:`ScoreCounts` with positive total weight."""
    if not isinstance(counts, ScoreCounts):
        raise ValueError(
            f"{what} needs a ScoreCounts (from score_counts or from_chunks); got "
            f"{type(counts).__name__}."
        )
    if not np.shape(counts.scores)[0]:
        raise ValueError(f"{what}: the counts are empty.")
    if not counts.total_weight > 0:
        raise ValueError(f"{what}: the total weight of the counts is zero.")
    return counts


# ------------------------------------------------------------------------------ core


def _bin_ids(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each score: ``searchsorted(edges[1:-1], s, side="right")``."""
    return np.searchsorted(edges[1:-1], scores, side="right")


def _reduce(
    scores: np.ndarray,
    count: np.ndarray | None,
    weight: np.ndarray,
    label_sum: np.ndarray,
    label_variance: float,
    score_max: np.ndarray | None,
    edges: np.ndarray | None,
    target_sum: np.ndarray | None = None,
    target_max: float | None = None,
) -> ScoreCounts:
    """Counts of entries (raw samples, ``count=None``, or merged counts): sorted by score,
    then summed per distinct score (``edges`` is ``None``) or per bin of ``edges``
    (``score_max``: each entry's largest score, ``None`` for single scores; ``target_sum``
    and ``target_max`` as in :class:`ScoreCounts`)."""
    order = np.argsort(scores)  # not stable: the sums need no order within a score
    s = scores[order]
    key = s if edges is None else _bin_ids(s, edges)
    start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if s.size else np.zeros(0, int)
    distinct = start.shape[0] == s.shape[0]  # nothing to add up (continuous scores)

    def total(a, add=np.add):
        return a[order] if distinct else add.reduceat(a[order], start)

    upper = None
    if edges is not None:
        upper = total(s if score_max is None else score_max, np.maximum)
    return ScoreCounts(
        scores=s[start],
        count=np.diff(np.r_[start, s.shape[0]]) if count is None else total(count),
        weight=total(weight),
        label_sum=total(label_sum),
        label_variance=np.asarray(label_variance, np.float64),
        score_max=upper,
        edges=edges,
        target_sum=None if target_sum is None else total(target_sum),
        target_max=None if target_sum is None else np.asarray(target_max, np.float64),
    )


def score_counts(
    scores: ArrayLike,
    labels: ArrayLike,
    sample_weight: ArrayLike | None = None,
    *,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
    bins: int | ArrayLike | None = None,
) -> ScoreCounts:
    r"""Counts by distinct score of one batch of data (vectorised NumPy, ``O(n log n)``).

    Args:
        scores: ``[n]`` finite scores (``-0.0`` counts as ``0.0``).
        labels: ``[n]`` labels in [0, 1] (0/1, or fractions).
        sample_weight: ``[n]`` finite non-negative weights (default ones).
        propensity: ``[n]`` propensities in (0, 1], for ``loss`` other than ``"naive"``.
        loss: the loss weighting of ``jaxcal.losses`` that the counts hold: ``"naive"``;
            ``"ips"`` (targets :math:`Y / \omega`: the counts keep their sums in
            ``target_sum`` besides the label sums) or ``"ips_positive"`` (weights
            :math:`v (Y / \omega + 1 - Y)`). ``"snips"`` normalises by sums over all the
            data, which a chunk does not hold: it is refused.
        bins: ``None`` (exact counts), the edges of a grid (quantised counts, module
            docstring), or a number of bins (:func:`quantize` with that number).

    Returns:
        The :class:`ScoreCounts`.

    Raises:
        ValueError: on empty input, NaN / inf scores, labels outside [0, 1], negative or
            non-finite weights, propensities outside (0, 1] (or missing for an IPS loss),
            ``loss="snips"``, a length mismatch, or bad ``bins``.

    Example:
        >>> from jaxcal.fitting.score_counts import score_counts
        >>> c = score_counts([0.3, 0.1, 0.3, 0.7], [1, 0, 0, 1], [1.0, 2.0, 1.0, 1.0])
        >>> c.scores.tolist(), c.weight.tolist(), c.label_sum.tolist()
        ([0.1, 0.3, 0.7], [2.0, 2.0, 1.0], [0.0, 1.0, 1.0])
    """
    s = check_scores(scores) + 0.0  # -0.0 -> 0.0 (one key per tie class)
    n = s.shape[0]
    y = _check_labels(labels, n)
    w = _check_weights(sample_weight, n)
    w, t = _loss_weighting(y, w, propensity, loss, n)
    counts = _raw_counts(s, y, w, t)
    if bins is None:
        return counts
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        return quantize(counts, bins)
    return quantize(counts, check_edges(bins))


def _loss_weighting(
    y: np.ndarray, v: np.ndarray, propensity: Any, loss: str, n: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(weights, targets)`` of a loss weighting (``jaxcal.losses``, in float64 on the
    host); ``targets`` is ``None`` where they are the labels."""
    check_loss(loss, propensity)
    if loss == "naive":
        return v, None
    if loss == "snips":
        raise ValueError(
            'counts cannot hold loss="snips": its normaliser is a sum over all the data, '
            'which a chunk does not see. Use loss="ips" or "ips_positive", or fit in memory.'
        )
    inv = 1.0 / check_propensity(propensity, n)
    if loss == "ips":
        return v, y * inv
    return v * (y * inv + 1.0 - y), None  # ips_positive


def _raw_counts(
    s: np.ndarray, y: np.ndarray, w: np.ndarray, t: np.ndarray | None = None
) -> ScoreCounts:
    """Exact counts of validated samples (``t``: targets other than the labels)."""
    wy = w * y
    top = None
    if t is not None:
        positive = t[w > 0]
        top = float(positive.max()) if positive.size else 0.0
    wt = None if t is None else w * t
    return _reduce(s, None, w, wy, float(np.dot(wy, 1.0 - y)), None, None, wt, top)


def _targets_of(parts: Sequence[ScoreCounts]) -> tuple[np.ndarray | None, float | None]:
    """The target sums of ``parts`` concatenated and their largest target, or ``(None,
    None)`` where every part's targets are its labels."""
    if all(p.target_sum is None for p in parts):
        return None, None
    sums = np.concatenate([p.targets for p in parts])
    tops = [float(p.target_max) for p in parts if p.target_max is not None]
    return sums, max(tops)


def merge(*parts: ScoreCounts) -> ScoreCounts:
    """The counts of the union of the data of ``parts``: per distinct score (or per bin) the
    sums of the parts. Exact counts merge with exact counts; quantised counts on one grid
    with each other and with exact counts (which are quantised to that grid first).

    Raises:
        ValueError: no parts, a part that is not a :class:`ScoreCounts`, or quantised parts
            on different grids.

    Example:
        >>> from jaxcal.fitting.score_counts import merge, score_counts
        >>> a = score_counts([0.1, 0.5], [0, 1])
        >>> b = score_counts([0.5, 0.9], [0, 1])
        >>> merge(a, b).count.tolist()
        [1, 2, 1]
    """
    if not parts:
        raise ValueError("merge needs at least one ScoreCounts.")
    for k, p in enumerate(parts):
        if not isinstance(p, ScoreCounts):
            raise ValueError(f"part {k} is a {type(p).__name__}, not a ScoreCounts.")
    grids = [p.edges for p in parts if p.edges is not None]
    edges = grids[0] if grids else None
    for g in grids[1:]:
        if g.shape != edges.shape or not np.array_equal(g, edges):
            raise ValueError(
                "cannot merge counts quantised on different grids (their bins overlap); "
                "quantise every part with the same edges."
            )
    if len(parts) == 1:
        return parts[0]

    def cat(name):
        return np.concatenate([getattr(p, name) for p in parts])

    upper = None
    if edges is not None:
        upper = np.concatenate([p.scores if p.score_max is None else p.score_max for p in parts])
    return _reduce(
        cat("scores"),
        cat("count"),
        cat("weight"),
        cat("label_sum"),
        float(sum(float(p.label_variance) for p in parts)),
        upper,
        edges,
        *_targets_of(parts),
    )


def quantize(counts: ScoreCounts, bins: int | ArrayLike) -> ScoreCounts:
    """Counts quantised to a grid (module docstring): one entry per non-empty bin.

    Args:
        counts: exact counts, or counts quantised on a grid that the new one coarsens (no
            old bin may straddle a new edge).
        bins: the edges of a grid (non-decreasing), or a number of bins ``B``: edges at
            distinct scores that cut the weight into about ``B`` equal parts (each bin starts
            at the first score whose weight below reaches ``k W / B``; a score heavier than
            ``W / B`` gets a bin of its own, where it costs the bound nothing).

    Returns:
        Quantised :class:`ScoreCounts`; their ``quantization_bound`` is the bound of the
        module docstring.

    Raises:
        ValueError: bad ``bins``, zero total weight (for a number of bins), or old bins
            that straddle the new edges.

    Example:
        >>> import numpy as np
        >>> from jaxcal.fitting.score_counts import quantize, score_counts
        >>> c = score_counts(np.linspace(0, 1, 1000), np.r_[np.zeros(500), np.ones(500)])
        >>> q = quantize(c, 100)
        >>> q.scores.shape, round(q.quantization_bound, 3)
        ((100,), 0.02)
    """
    if not isinstance(counts, ScoreCounts):
        raise ValueError(f"quantize needs a ScoreCounts; got {type(counts).__name__}.")
    upper = counts.scores if counts.score_max is None else counts.score_max
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        edges = _equal_weight_edges(counts, upper, int(bins))
    else:
        edges = check_edges(bins)
    if counts.edges is not None and np.any(
        _bin_ids(counts.scores, edges) != _bin_ids(upper, edges)
    ):
        raise ValueError(
            "these counts are quantised on a grid whose bins straddle the new edges, so their "
            "samples cannot be re-binned exactly; quantise the exact counts instead."
        )
    return _reduce(
        counts.scores,
        counts.count,
        counts.weight,
        counts.label_sum,
        float(counts.label_variance),
        upper,
        edges,
        *_targets_of([counts]),
    )


def _equal_weight_edges(counts: ScoreCounts, upper: np.ndarray, n_bins: int) -> np.ndarray:
    """Edges at the entries where the weight below crosses ``k W / n_bins``."""
    if n_bins < 1:
        raise ValueError(f"the number of bins must be a positive integer; got {n_bins}.")
    if not np.shape(counts.scores)[0]:
        raise ValueError("cannot place bins on empty counts.")
    w = counts.weight
    total = float(w.sum())
    if not total > 0:
        raise ValueError("cannot place equal-weight bins: the total weight is zero.")
    below = np.cumsum(w) - w
    k = np.minimum(np.floor(below * (n_bins / total)), n_bins - 1)
    start = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return np.r_[counts.scores[start], upper[-1]]


# ----------------------------------------------------------------------------- chunks
