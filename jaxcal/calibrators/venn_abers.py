r"""Venn-Abers predictors: inductive (IVAP) and cross (CVAP), for binary scores.

Stable public signatures:

.. code-block:: python

    VennAbers(*, n_folds=1).fit(
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

**CVAP** (``n_folds=K >= 2``): the calibration points are split into ``K`` folds (by
``fold=`` ids, else deterministic folds stratified by label and interleaved in score order,
:func:`jaxcal.fitting.folds.stratified_folds`), fold ``k`` calibrates an IVAP
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
it), with fixed sizes, and the CVAP folds of the eager fit (the same deterministic rule). The
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
    check_int,
    check_labels,
    check_sample_weight,
    check_scores,
)
from jaxcal._weights import normalize_weights_host
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._scaling import (
    ORDER,
    ScoreScaling,
    fit_dtype,
    fit_scaling,
    pure_identity_scaling,
)
from jaxcal.calibrators._venn_abers_core import fit_tables, fit_tables_pure, va_lookup
from jaxcal.fitting.folds import stratified_folds

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

    The float leaves have the dtype of the scores the predictor was fitted on (float32
    scores give float32 tables, also with x64 enabled).

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> fitted = jaxcal.VennAbers().fit(s, y)
        >>> type(fitted).__name__, fitted.n_folds, fitted.batch_shape
        ('FittedVennAbers', 1, ())
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

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 0, 1, 0, 1, 1])
            >>> p0, p1 = jaxcal.VennAbers().fit(s, y).interval(np.array([0.05, 0.35]))
            >>> p0.tolist(), p1.tolist()
            ([0.0, 0.333], [0.333, 0.667])
        """
        return self._lookup(scores, per_fold_scores, "interval")

    def predict(self, scores: ArrayLike, *, per_fold_scores: bool = False) -> jax.Array:
        """The merged probability :math:`p_1 / (1 - p_0 + p_1)` (for CVAP
        :math:`GM(p_1) / (GM(1 - p_0) + GM(p_1))`), of the shape of ``scores`` (see
        :meth:`interval`).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 0, 1, 0, 1, 1])
            >>> jaxcal.VennAbers().fit(s, y).predict(np.array([0.35]))  # (2/3) / (1 - 1/3 + 2/3)
            Array([0.5], dtype=float32)
        """
        return self._lookup(scores, per_fold_scores, "predict")[0]

    def _lookup(self, scores, per_fold_scores: bool, want: str):
        k = self.n_folds
        if per_fold_scores and k == 1:
            raise ValueError("per_fold_scores=True needs a cross Venn-Abers (n_folds >= 2).")
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
class VennAbers(Calibrator[FittedVennAbers]):
    """Inductive (IVAP) or cross (CVAP) Venn-Abers predictor (Vovk & Petej 2014; Vovk,
    Petej & Fedorova 2015); see the module docstring for the formulas.

    Args:
        n_folds: ``1`` for an IVAP on all calibration points, or ``K >= 2`` for a CVAP of
            ``K`` folds merged by geometric means. Without ``fold`` ids at ``fit`` the folds
            are deterministic, stratified by label and interleaved in score order
            (:func:`jaxcal.fitting.folds.stratified_folds`).

    Raises:
        ValueError: ``n_folds`` not an integer ``>= 1``, when the predictor is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=500); y = (rng.uniform(size=500) < 1 / (1 + np.exp(-s)))
        >>> p0, p1 = jaxcal.VennAbers(n_folds=5).fit(s, y).interval(s[:3])
        >>> bool(np.all(p0 <= p1))
        True
        >>> jaxcal.VennAbers(n_folds=0)
        Traceback (most recent call last):
        ...
        ValueError: n_folds must be an integer >= 1; got 0.
    """

    n_folds: int = 1

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        check_int(self.n_folds, "n_folds", minimum=1)

    def _folds_of(self, fold, n: int):
        """The fold ids given at ``fit`` checked against ``n_folds`` (concrete ids)."""
        if self.n_folds == 1 and fold is not None:
            raise ValueError("fold ids need a cross Venn-Abers (n_folds >= 2).")
        return None if fold is None else _check_folds(fold, n, self.n_folds)

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
                by label and interleaved in score order,
                :func:`jaxcal.fitting.folds.stratified_folds`).

        Returns:
            The fitted predictor; its float leaves have the dtype of ``scores``.

        Raises:
            ValueError: invalid data, ``loss="ips"``, bad fold ids. On traced inputs
                (inside ``jit``, ``vmap``, ``grad``) ``fit`` is :meth:`fit_pure`, where
                invalid data gives NaN instead.

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 0, 1, 0, 1, 1])
            >>> cvap = jaxcal.VennAbers(n_folds=2).fit(s, y, fold=np.array([0, 1] * 3))
            >>> cvap.n_folds, cvap.predict(np.array([0.35])).shape
            (2, (1,))
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
        dtype = fit_dtype(scores)
        data = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        fold = self._folds_of(fold, data.scores.shape[0])
        return self._fit_problems(data, None, 1, fold, (), dtype)

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
        ids if given (concrete or traced), else the deterministic folds of :meth:`fit`
        (:func:`jaxcal.fitting.folds.stratified_folds`, computed in the program). Data
        :meth:`fit` would refuse (non-finite scores, labels not 0/1, a single class,
        ``loss="ips"`` targets that differ from the labels, fold ids outside ``[0, K)``)
        give a predictor of NaN.

        Args:
            scores, labels, sample_weight, propensity, loss, fold: as in :meth:`fit`.

        Returns:
            The fitted predictor (``n_folds == K``, ``batch_shape == ()``).

        Raises:
            ValueError: invalid shapes, fold ids with ``n_folds=1``.

        Example:
            >>> import jax, jaxcal, jax.numpy as jnp
            >>> s = jnp.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = jnp.array([0, 0, 1, 0, 1, 1])
            >>> jax.jit(lambda s, y: jaxcal.VennAbers().fit_pure(s, y).predict(s[2:3]))(s, y)
            Array([0.5], dtype=float32)
        """
        data = prepare_fit_pure(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        if fold is None:
            return poison(self._fit_pure(data), data.invalid)
        n, k = data.scores.shape[0], self.n_folds
        invalid = data.invalid | jnp.any(data.targets != data.labels)
        if k == 1:
            raise ValueError("fold ids need a cross Venn-Abers (n_folds >= 2).")
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
        if self.n_folds == 1:
            f = jnp.zeros(n, jnp.int32)
        else:
            f = stratified_folds(
                data.labels, self.n_folds, scores=data.scores, weights=data.weights
            )
        invalid = jnp.any(data.targets != data.labels)
        return poison(self._tables_pure(data, jnp.asarray(f, jnp.int32)), invalid)

    def _tables_pure(self, data: PureFitData, fold: jax.Array) -> FittedVennAbers:
        """The tables of the ``K`` fold problems (weights normalised by a power of two, as
        on the host: exact, and the tables do not depend on the scale of the weights)."""
        w = data.weights
        top = jax.lax.stop_gradient(jnp.max(w))
        e = jnp.frexp(jnp.where(top > 0, top, 1.0))[1] - 1
        w = w * jnp.ldexp(jnp.ones((), w.dtype), -e)
        tables = fit_tables_pure(data.scores, data.labels, w, fold, self.n_folds)
        scaling = pure_identity_scaling(data.scores.dtype)
        return FittedVennAbers(*tables, scaling=scaling, n_folds=self.n_folds, batch_shape=())

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
        ``scores``; without it each problem gets the folds :meth:`fit` would give it.

        Returns:
            A predictor with ``batch_shape == (B,)``: ``predict`` takes ``[B, m]`` scores.

        Raises:
            ValueError: invalid inputs (per problem: a single class, ...), or traced inputs
                (inside ``jit``: ``jax.vmap`` :meth:`fit` over the problems instead).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 1, 0, 1, 0, 1])
            >>> batch = jaxcal.VennAbers().fit_batch(s, y, group=np.array([0, 0, 0, 1, 1, 1]))
            >>> batch.batch_shape, batch.predict(np.array([[0.15], [0.45]])).shape
            ((2,), (2, 1))
        """
        if _shapes.is_traced(scores, labels, mask, group, sample_weight, fold):
            raise ValueError(
                "fit_batch takes concrete arrays (it groups and pads on the host); inside "
                "jit, batch the problems with jax.vmap over fit."
            )
        dtype = fit_dtype(scores)
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
        f = self._folds_of(f, s.shape[0])
        return self._fit_problems(FitData(s, y, y, w), code, n_rows, f, (n_rows,), dtype)

    def _fit_problems(self, data: FitData, code, n_codes: int, fold, batch_shape, dtype):
        """Folds, the exact score transform and the tables of all ``n_codes x K``
        problems (``code``: each row's problem, ``None`` for one problem), in ``dtype``."""
        if not np.array_equal(data.targets, data.labels):
            raise ValueError(
                "VennAbers needs 0/1 labels: loss='ips' turns them into targets Y/propensity. "
                "Pass the inverse propensities as sample_weight, or use loss='ips_positive' "
                "or 'snips' (which only re-weight)."
            )
        k, n = self.n_folds, data.scores.shape[0]
        w = normalize_weights_host(data.weights)
        scaling, s = fit_scaling(
            data.scores, w, shift=True, kind=ORDER, what="VennAbers", dtype=dtype
        )
        if k > 1 and fold is None:  # on the transformed scores, as the pure fit
            fold = stratified_folds(data.labels, k, scores=s, weights=data.weights, group=code)
        problem = np.zeros(n, np.int64) if code is None else code * k
        if fold is not None:
            problem = problem + fold
        tables = fit_tables(s, data.labels, w, problem, n_codes * k, dtype=dtype)
        return FittedVennAbers(*tables, scaling=scaling, n_folds=k, batch_shape=batch_shape)
