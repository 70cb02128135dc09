r"""Venn-Abers predictors: inductive (IVAP) and cross (CVAP), for binary scores.

Stable public signatures:

.. code-block:: python

    VennAbers(*, cross_folds=None, seed=0).fit(
        scores, labels, *, sample_weight=None, propensity=None, loss="naive", fold=None)
        -> FittedVennAbers           # .predict(scores), .interval(scores), .save(path)
    VennAbers(...).fit_batch(scores, labels, *, mask=None, group=None,
                             sample_weight=None, fold=None) -> FittedVennAbers  # [B, m]

**IVAP** (Vovk & Petej 2014; Vovk, Petej & Fedorova 2015). For a test score :math:`t`,
:math:`p_\ell(t)` is the isotonic regression of the calibration labels on the scores, with
the test point :math:`(t, \ell)` added, evaluated at :math:`t`. The pair
:math:`[p_0, p_1]` is a multiprobability prediction; with exchangeable calibration and test
points, one of the two is perfectly calibrated (Vovk & Petej 2014, Theorem 1). The merged
probability

.. math::  p = \frac{p_1}{1 - p_0 + p_1}

minimises the worst-case log-loss regret against the two (Vovk, Petej & Fedorova 2015,
Section 4). Every test position is computed at once from the greatest convex minorant of
the calibration scores' cumulative sum diagram, :math:`O(n \log n)`
(``jaxcal.calibrators._venn_abers_core``), not one isotonic fit per test point.

**CVAP** (``cross_folds=K``): the calibration points are split into ``K`` folds (stratified
by label, at random with ``seed``, or by ``fold=`` ids), fold ``k`` calibrates an IVAP
:math:`[p_0^k, p_1^k]`, and the folds are merged as in Vovk, Petej & Fedorova (2015,
Section 4, log loss):

.. math::  p = \frac{GM(p_1)}{GM(1 - p_0) + GM(p_1)},

geometric means over the folds. ``interval`` returns :math:`[1 - GM(1 - p_0), GM(p_1)]`, of
which ``predict`` is the same merge formula. In the paper the scoring model is retrained
without fold ``k`` for IVAP ``k``: give each fold's scores of the calibration points at
``fit`` (the out-of-fold scores, with ``fold=``) and the test scores of every fold's model
with ``per_fold_scores=True`` at predict. With one fixed scoring model, CVAP is a
bagging of IVAPs on disjoint parts of the calibration data.

**Weights.** ``sample_weight`` (e.g. inverse propensities, labels staying 0/1) gives
weighted isotonic fits, and the test point counts with the mean calibration weight of its
problem (1 without weights). The validity guarantee rests on exchangeability of the
calibration and test points and does *not* survive weighting: with weights this is a
weighted isotonic calibration with an interval that shows the influence of one more point,
not a calibrated multiprobability prediction. ``loss="ips"`` (targets :math:`Y/\omega`,
not labels) is refused; ``"ips_positive"`` and ``"snips"`` change only the weights.

**Inside jit.** On traced inputs (inside a caller's ``jit``, ``vmap`` or ``grad``), ``fit``
is :meth:`VennAbers.fit_pure`: the same tables computed in the program on the portable path
(never the compiled CPU kernel, so ``jax.export`` works and the numbers do not depend on
it), with fixed sizes, and CVAP folds equal to the eager fit's for the same ``seed``. The
tables are differentiable in the labels and weights (each entry is the slope of a bridge of
the cumulative sum diagram); the dependence on the scores is piecewise constant (zero
derivative). Invalid data gives NaN, and so does a traced ``predict`` or ``interval`` of a
non-finite score.

**Groups.** ``fit_batch`` fits ``B`` problems in one call (``[B, n]`` with a mask, or 1-D
arrays with ``group`` ids: row ``g`` of the result is the ``g``-th smallest id);
``predict`` then takes ``[B, m]`` scores.

Example:
    >>> import jaxcal, numpy as np
    >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 0, 1, 0, 1, 1])
    >>> va = jaxcal.VennAbers().fit(s, y)
    >>> p0, p1 = va.interval(np.array([0.35]))
    >>> float(p0[0]), float(p1[0])
    (0.333..., 0.666...)
    >>> va.predict(np.array([0.35]))
    Array([0.5], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import FitData, PureFitData, poison, prepare_fit, prepare_fit_pure
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import (
    check_batch_inputs,
    check_groups,
    check_labels,
    check_sample_weight,
    check_scores,
)
from jaxcal._weights import normalize_weights_host
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._scaling import ORDER, ScoreScaling, fit_scaling, pure_identity_scaling
from jaxcal.calibrators._venn_abers_core import (
    fit_tables,
    fit_tables_pure,
    stratified_folds_pure,
    va_lookup,
)

__all__ = ["VennAbers", "FittedVennAbers"]


@pytree_dataclass
class FittedVennAbers(FittedCalibrator):
    """A fitted Venn-Abers predictor: lookup tables of ``p0`` and ``p1`` for every position
    of a test score among the calibration scores, per problem (batch row x fold).

    Attributes:
        edges: ``[R]`` the distinct calibration scores of every problem (transformed by
            ``scaling``), problem after problem.
        p0, p1: ``[R + P]`` the tables (``jaxcal.calibrators._venn_abers_core``).
        run_start, run_count: ``[P]`` where each problem's scores lie in ``edges``.
            (The eager fit pads these to bucket sizes; the pure fit, inside ``jit``, has
            ``R = n`` edge slots of which the first ``run_count`` per problem are real, and
            ``P = K``.)
        scaling: the exact score transform applied before lookup
            (``jaxcal.calibrators._scaling``).
        n_folds: ``K`` (1 for an IVAP).
        batch_shape: ``()`` for one problem, ``(B,)`` after ``fit_batch``.
    """

    edges: jax.Array
    p0: jax.Array
    p1: jax.Array
    run_start: jax.Array
    run_count: jax.Array
    scaling: ScoreScaling
    n_folds: int = static_field(default=1)
    batch_shape: tuple = static_field(default=())

    def interval(
        self, scores: ArrayLike, *, per_fold_scores: bool = False
    ) -> tuple[jax.Array, jax.Array]:
        """The multiprobability prediction ``(p0, p1)`` (for CVAP the geometric-mean
        interval ``(1 - GM(1 - p0), GM(p1))``), each of the shape of ``scores``.

        Args:
            scores: test scores: any shape for one problem, ``[B, ...]`` after
                ``fit_batch``.
            per_fold_scores: CVAP only: ``scores`` carry a fold axis of length ``K`` (axis 0,
                after the batch axis), row ``k`` holding the scores of fold ``k``'s model.

        Raises:
            ValueError: non-finite scores, or a shape that does not fit the batch / folds.
        """
        return self._lookup(scores, per_fold_scores, "interval")

    def predict(self, scores: ArrayLike, *, per_fold_scores: bool = False) -> jax.Array:
        """The merged probability :math:`p_1 / (1 - p_0 + p_1)` (for CVAP
        :math:`GM(p_1) / (GM(1 - p_0) + GM(p_1))`), of the shape of ``scores`` (see
        :meth:`interval`)."""
        return self._lookup(scores, per_fold_scores, "predict")[0]

    def _lookup(self, scores, per_fold_scores: bool, want: str):
        k = self.n_folds
        if per_fold_scores and k == 1:
            raise ValueError("per_fold_scores=True needs a cross Venn-Abers (cross_folds=K).")
        float32_out = getattr(scores, "dtype", None) == np.float32
        u = self.scaling.apply(scores)
        traced = _shapes.is_traced(u, self)
        u = jnp.asarray(u) if traced else np.asarray(u)
        lead = self.batch_shape + ((k,) if per_fold_scores else ())
        if u.shape[: len(lead)] != lead:
            raise ValueError(
                f"scores of shape {u.shape} do not fit this predictor: expected a leading "
                f"shape {lead} (batch {self.batch_shape}"
                f"{', then the fold axis' if per_fold_scores else ''})."
            )
        out_shape = u.shape[: len(self.batch_shape)] + u.shape[len(lead) :]
        rows, cols = math.prod(self.batch_shape), k if per_fold_scores else 1
        per_row = math.prod(out_shape) // max(rows, 1)  # queries per batch row
        t = u.reshape(rows, cols, per_row).transpose(0, 2, 1).reshape(-1, cols)
        tables = (self.edges, self.p0, self.p1, self.run_start, self.run_count)
        core = functools.partial(va_lookup, n_folds=k, want=want)
        if traced:
            # the position of a score among the edges is piecewise constant: no derivative
            # flows through the search (reverse mode would meet its while loop)
            t = jax.lax.stop_gradient(t.astype(self.edges.dtype))
            edges = jax.lax.stop_gradient(self.edges)
            out = core(edges, *tables[1:], t, jnp.int32(max(per_row, 1)))
            # a non-finite score cannot raise inside a trace: NaN, never a number
            bad = ~jnp.all(jnp.isfinite(t), axis=1)
            return tuple(jnp.where(bad, jnp.nan, o).reshape(out_shape) for o in out)
        n = t.shape[0]
        fill = t.flat[0] if n else 0.0  # padding: copies of a valid score
        t = _shapes.pad_axis(t.astype(self.edges.dtype), _shapes.padded_size(n), fill)
        out = core(*tables, t, np.int32(max(per_row, 1)))
        out = (np.asarray(o)[:n].reshape(out_shape) for o in out)
        return tuple(jax.device_put(o.astype(np.float32) if float32_out else o) for o in out)


def _check_folds(fold, n: int, k: int) -> np.ndarray:
    f = np.asarray(fold)
    if f.shape != (n,):
        raise ValueError(f"fold must hold one fold id per score ({n}); got shape {f.shape}.")
    if f.dtype.kind not in "biu":
        raise ValueError(f"fold must hold integer ids in [0, {k}); got dtype {f.dtype}.")
    if f.size and (f.min() < 0 or f.max() >= k):
        raise ValueError(f"fold ids must lie in [0, {k}); got min {f.min()}, max {f.max()}.")
    return f.astype(np.int64)


def _stratified_folds(labels: np.ndarray, code: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold ids stratified by (problem, label): a random order within every stratum, dealt
    round-robin to the ``k`` folds."""
    n = labels.shape[0]
    key = np.random.default_rng(seed).permutation(n)
    order = np.lexsort((key, labels, code))
    cs, ls = code[order], labels[order]
    new = np.ones(n, bool)
    new[1:] = (cs[1:] != cs[:-1]) | (ls[1:] != ls[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    fold = np.empty(n, np.int64)
    fold[order] = (np.arange(n) - start) % k
    return fold


def _group_codes(group: np.ndarray) -> tuple[int, np.ndarray]:
    """``(G, code)``: dense codes ``0..G-1`` of integer ids in sorted-id order (a lookup
    table when the ids are small non-negative integers, else ``np.unique``)."""
    if group.size and group.min() >= 0 and group.max() < 4 * group.size + 1024:
        present = np.zeros(int(group.max()) + 1, bool)
        present[group] = True
        table = np.cumsum(present) - 1
        return int(table[-1]) + 1, table[group]
    ids, code = np.unique(group, return_inverse=True)
    return ids.size, code.reshape(-1)


def _check_two_classes_per_problem(y, w, code, n_codes: int) -> None:
    if w.min() == w.max():  # equal (positive) weights: counts suffice
        pos = np.bincount(code, y, minlength=n_codes)
        neg = np.bincount(code, minlength=n_codes) - pos
    else:
        pos = np.bincount(code, w * y, minlength=n_codes)
        neg = np.bincount(code, w * (1 - y), minlength=n_codes)
    bad = np.flatnonzero((pos <= 0) | (neg <= 0))
    if bad.size:
        raise ValueError(
            f"{bad.size} group(s) contain only one class where the weight is positive (first: "
            f"row {int(bad[0])}); calibration needs both positives and negatives."
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class VennAbers(Calibrator):
    """Inductive (IVAP) or cross (CVAP) Venn-Abers predictor (Vovk & Petej 2014; Vovk,
    Petej & Fedorova 2015); see the module docstring for the formulas.

    Args:
        cross_folds: ``None`` for an IVAP on all calibration points, or ``K >= 2`` for a
            CVAP of ``K`` folds merged by geometric means.
        seed: the seed of the random stratified fold assignment (when ``fit`` gets no
            ``fold`` ids).

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=500); y = (rng.uniform(size=500) < 1 / (1 + np.exp(-s)))
        >>> p0, p1 = jaxcal.VennAbers(cross_folds=5).fit(s, y).interval(s[:3])
    """

    cross_folds: int | None = None
    seed: int = 0

    def _check_hyperparameters(self) -> None:
        k = self.cross_folds
        if k is not None and (isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 2):
            raise ValueError(f"cross_folds must be None or an integer >= 2; got {k!r}.")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise ValueError(f"seed must be an integer; got {self.seed!r}.")

    @property
    def _k(self) -> int:
        return 1 if self.cross_folds is None else int(self.cross_folds)

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        fold: ArrayLike | None = None,
    ) -> FittedVennAbers:
        """Fit on one calibration set.

        Args:
            scores: ``[n]`` finite calibration scores.
            labels: ``[n]`` 0/1 labels.
            sample_weight: optional ``[n]`` non-negative weights (module docstring).
            propensity: optional ``[n]`` propensities, for ``loss="ips_positive"`` or
                ``"snips"`` (which re-weight; ``"ips"`` is refused).
            loss: ``"naive"``, ``"ips_positive"`` or ``"snips"``.
            fold: CVAP only: optional ``[n]`` fold ids in ``[0, K)`` (default: stratified
                at random with ``seed``).

        Returns:
            The fitted predictor.

        Raises:
            ValueError: invalid hyperparameters or data, ``loss="ips"``, bad fold ids. On
                traced inputs (inside ``jit``, ``vmap``, ``grad``) ``fit`` is
                :meth:`fit_pure`, where invalid data gives NaN instead.
        """
        if _shapes.is_traced(scores, labels, sample_weight, propensity, fold):
            return self.fit_pure(
                scores,
                labels,
                sample_weight=sample_weight,
                propensity=propensity,
                loss=loss,
                fold=fold,
            )
        self._check_hyperparameters()
        data = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        return self._fit_problems(data, np.zeros(data.scores.shape[0], np.int64), 1, fold, ())

    def fit_pure(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        fold: ArrayLike | None = None,
    ) -> FittedVennAbers:
        """The pure fit: the predictor of :meth:`fit`, computed in JAX alone.

        It runs inside ``jit``, under ``vmap`` (one problem per row) and ``jvp`` / ``grad``
        (with respect to the labels and weights: the tables are exact rational functions
        of the CSD wherever the bridges of the sweeps do not change; the dependence on the
        scores is piecewise constant, zero derivative), and exports with ``jax.export``.
        The runs, the CSD and the sweeps are computed in the program, on the portable path
        (never the compiled CPU kernel), in the scores' dtype; the tables have fixed sizes
        (``jaxcal.calibrators._venn_abers_core.fit_tables_pure``). CVAP folds: the ``fold``
        ids if given (concrete or traced), else the stratified random folds of ``seed``, the
        same as :meth:`fit`'s (the permutation depends on ``n`` and ``seed`` only, so it is
        drawn on the host). Data :meth:`fit` would refuse (non-finite scores, labels not
        0/1, a single class, ``loss="ips"`` targets that differ from the labels, fold ids
        outside ``[0, K)``) give a predictor of NaN.

        Args:
            scores, labels, sample_weight, propensity, loss, fold: as in :meth:`fit`.

        Returns:
            The fitted predictor (``n_folds == K``, ``batch_shape == ()``).

        Raises:
            ValueError: invalid hyperparameters or shapes, fold ids without ``cross_folds``.
        """
        self._check_hyperparameters()
        data = prepare_fit_pure(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        n, k = data.scores.shape[0], self._k
        invalid = data.invalid | jnp.any(data.targets != data.labels)
        if k == 1:
            if fold is not None:
                raise ValueError("fold ids need a cross Venn-Abers (cross_folds=K).")
            f = jnp.zeros(n, jnp.int32)
        elif fold is None:
            f = stratified_folds_pure(data.labels, k, int(self.seed))
        else:
            if not _shapes.is_traced(fold):
                _check_folds(fold, n, k)
            f = jnp.asarray(fold)
            if f.shape != (n,) or not jnp.issubdtype(f.dtype, jnp.integer):
                raise ValueError(
                    f"fold must hold {n} integer ids in [0, {k}); got {f.dtype} of shape {f.shape}."
                )
            invalid = invalid | jnp.any((f < 0) | (f >= k))
            f = jnp.clip(f, 0, k - 1).astype(jnp.int32)
        return poison(self._tables_pure(data, f), invalid)

    def _fit_pure(self, data: PureFitData) -> FittedVennAbers:
        n = data.scores.shape[0]
        if self._k == 1:
            f = jnp.zeros(n, jnp.int32)
        else:
            f = stratified_folds_pure(data.labels, self._k, int(self.seed))
        invalid = jnp.any(data.targets != data.labels)
        return poison(self._tables_pure(data, f), invalid)

    def _tables_pure(self, data: PureFitData, fold: jax.Array) -> FittedVennAbers:
        """The tables of the ``K`` fold problems (weights normalised by a power of two, as
        on the host: exact, and the tables do not depend on the scale of the weights)."""
        w = data.weights
        top = jax.lax.stop_gradient(jnp.max(w))
        e = jnp.frexp(jnp.where(top > 0, top, 1.0))[1] - 1
        w = w * jnp.ldexp(jnp.ones((), w.dtype), -e)
        tables = fit_tables_pure(data.scores, data.labels, w, fold, self._k)
        scaling = pure_identity_scaling(data.scores.dtype)
        return FittedVennAbers(*tables, scaling=scaling, n_folds=self._k, batch_shape=())

    def _fit(self, data: FitData) -> FittedVennAbers:
        return self._fit_problems(data, np.zeros(data.scores.shape[0], np.int64), 1, None, ())

    def fit_batch(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        group: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        fold: ArrayLike | None = None,
    ) -> FittedVennAbers:
        """Fit ``B`` independent predictors in one call.

        Either ``[B, n]`` arrays with an optional boolean ``mask``, or 1-D arrays with integer
        ``group`` ids (row ``g`` of the result is the ``g``-th smallest id). Inverse-propensity
        weights go in ``sample_weight`` (labels stay 0/1). ``fold`` (CVAP) has the shape of
        ``scores``.

        Returns:
            A predictor with ``batch_shape == (B,)``: ``predict`` takes ``[B, m]`` scores.

        Raises:
            ValueError: invalid inputs (per problem: a single class, ...), or traced inputs
                (inside ``jit``: ``jax.vmap`` :meth:`fit` over the problems instead).
        """
        self._check_hyperparameters()
        if _shapes.is_traced(scores, labels, mask, group, sample_weight, fold):
            raise ValueError(
                "fit_batch takes concrete arrays (it groups and pads on the host); inside "
                "jit, batch the problems with jax.vmap over fit."
            )
        if group is not None:
            if mask is not None:
                raise ValueError("pass either mask (for [B, n] inputs) or group, not both.")
            s = check_scores(scores)
            y = check_labels(labels, s.shape[0])
            w = check_sample_weight(sample_weight, s.shape[0])
            n_rows, code = _group_codes(check_groups(group, s.shape[0]))
            _check_two_classes_per_problem(y, w, code, n_rows)
            f = None if fold is None else np.asarray(fold).reshape(-1)
        else:
            s2, y2, w2, m2 = check_batch_inputs(
                scores, labels, mask=mask, sample_weight=sample_weight
            )
            n_rows, width = s2.shape
            keep = m2.reshape(-1)
            s, y, w = s2.reshape(-1)[keep], y2.reshape(-1)[keep], w2.reshape(-1)[keep]
            code = np.repeat(np.arange(n_rows), width)[keep]
            if fold is not None:
                f2 = np.asarray(fold)
                if f2.shape != s2.shape:
                    raise ValueError(f"shape mismatch: scores {s2.shape} but fold {f2.shape}.")
                f = f2.reshape(-1)[keep]
            else:
                f = None
        data = FitData(s, y, y, w)
        return self._fit_problems(data, code, n_rows, f, (n_rows,))

    def _fit_problems(self, data: FitData, code, n_codes: int, fold, batch_shape):
        """Folds, the exact score transform and the tables of all ``n_codes x K``
        problems."""
        if not np.array_equal(data.targets, data.labels):
            raise ValueError(
                "VennAbers needs 0/1 labels: loss='ips' turns them into targets Y/propensity. "
                "Pass the inverse propensities as sample_weight, or use loss='ips_positive' "
                "or 'snips' (which only re-weight)."
            )
        k = self._k
        n = data.scores.shape[0]
        if k == 1:
            if fold is not None:
                raise ValueError("fold ids need a cross Venn-Abers (cross_folds=K).")
            f = np.zeros(n, np.int64)
        elif fold is None:
            f = _stratified_folds(data.labels, code, k, int(self.seed))
        else:
            f = _check_folds(fold, n, k)
        w = normalize_weights_host(data.weights)
        scaling, s = fit_scaling(data.scores, w, shift=True, kind=ORDER, what="VennAbers")
        tables = fit_tables(s, data.labels, w, code * k + f, n_codes * k)
        return FittedVennAbers(*tables, scaling=scaling, n_folds=k, batch_shape=batch_shape)
