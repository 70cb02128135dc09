r"""``fit_chunks`` of the parametric calibrators: the exact fit on data read in chunks (a
source, :mod:`jaxcal._chunks`), on one process or on each process of a ``jax.distributed``
job, each reading its own chunks.

1. **Scan.** One pass checks every chunk (a ``ValueError`` names the chunk) and collects the
   rows, the largest chunk, the range of the scores of positive weight, the sums
   :math:`\sum vY`, :math:`\sum v(1-Y)` and :math:`\sum vY/\omega` (both classes present;
   the ``"snips"`` normaliser :math:`\kappa`), and, in float32, whether the cast rounds some
   score. Sums and extremes are then taken over the processes.
2. **The fit's inputs, as** ``fit`` **makes them.** The family's checks and the exact score
   transform (``jaxcal.calibrators._scaling``) need only the smallest and largest training
   score, so they run on that pair: every check a family makes on its training scores
   depends on them alone (two distinct scores, the range of probabilities, positive shifted
   scores, a logit that is not 0). The context is the transformed range.
3. **The fit** (:func:`jaxcal.fitting.streamed.fit_linear_streamed`): each chunk's scores
   transformed, its targets and weights from the loss weighting, on every pass.

The fit computes in, and its float leaves have, the dtype of the chunks' scores
(:func:`~jaxcal.calibrators._scaling.fit_dtype`; float64 if any chunk's scores are, on any
process, with x64 enabled).

The result is the calibrator ``fit`` returns on the concatenated chunks (of every process),
up to the rounding of sums. Two things differ, both in float32 only: the scores are shifted
(``c``) whenever they lie within a factor 1.5 and the cast rounds some of them (``fit``
shifts only when the rounding merges distinct scores, which needs all the scores at once to
count), and no ``PrecisionWarning`` counts the ties that rounding makes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import distributed
from jaxcal._chunks import Chunk, chunk_source, read_chunk, targets_weights
from jaxcal._shapes import padded_size
from jaxcal._validation import check_two_classes
from jaxcal.calibrators._scaling import (
    _SHIFT_RATIO,
    ARITHMETIC,
    ScoreScaling,
    _exponent,
    fit_dtype,
    fit_scaling,
    working_dtype,
)
from jaxcal.families.linear import LinearLogitFamily, ScoreRange
from jaxcal.fitting.linear import default_tol
from jaxcal.fitting.solver import warn_if_not_converged
from jaxcal.fitting.streamed import fit_linear_streamed
from jaxcal.losses import LOSSES

__all__ = ["fit_chunks"]


class _Scan(NamedTuple):
    """What the first pass found, over every process."""

    rows: int
    chunk_rows: int  # the largest chunk
    lo: float  # the range of the scores of positive weight
    hi: float
    kappa: float  # the "snips" normaliser
    inexact: bool  # the cast to float32 rounds some score of positive weight
    dtype: np.dtype  # the fit's: float64 if some chunk's scores are (fit_dtype), else float32


def _scan(chunks: Callable[[], Iterator[tuple[np.dtype, Chunk]]]) -> _Scan:
    """One pass over the checked chunks, each with the :func:`fit_dtype` of its scores
    (module docstring); an error reading a chunk is raised on every process
    (``jaxcal.fitting.streamed._Passes``)."""
    rows = largest = 0
    lo, hi, inexact, wide = np.inf, -np.inf, False, False
    sums = np.zeros(3)  # sum vY, sum v(1 - Y), sum vY/omega
    error = None
    float32 = working_dtype() != np.float64
    try:
        for dtype, c in chunks():
            wide = wide or dtype == np.float64
            rows += c.scores.shape[0]
            largest = max(largest, c.scores.shape[0])
            pos = c.sample_weight > 0
            s = c.scores if pos.all() else c.scores[pos]
            if s.size:
                lo, hi = min(lo, float(s.min())), max(hi, float(s.max()))
                inexact = inexact or (float32 and bool(np.any(s.astype(np.float32) != s)))
            vy = c.sample_weight * c.labels
            inv = 0.0 if c.propensity is None else np.dot(vy, 1.0 / c.propensity)
            sums += (vy.sum(), np.dot(c.sample_weight, 1.0 - c.labels), inv)
    except Exception as exc:  # raised below on every process, not only on this one
        error = exc
    counts, sums = distributed.process_sum((np.array([rows, error is not None]), sums))
    if counts[1]:
        if error is not None:
            raise error
        raise ValueError(f"{int(counts[1])} process(es) failed to read their chunks.")
    several = " (on every process)" if distributed.process_count() > 1 else ""
    if counts[0] == 0:
        raise ValueError(f"the source returned no rows{several}; it needs labelled scores.")
    if not sums[0] + sums[1] > 0:
        raise ValueError(f"sample_weight is zero on every row{several}; need positive weight.")
    # both classes with positive weight: the check of fit, on each class's total weight
    check_two_classes(np.array([1.0, 0.0]), sums[:2], what="the labels of the source")
    return _Scan(
        rows=int(counts[0]),
        chunk_rows=int(distributed.process_max(largest)),
        lo=-distributed.process_max(-lo),
        hi=distributed.process_max(hi),
        kappa=float(sums[0] / sums[2]) if sums[2] > 0 else 1.0,
        inexact=bool(distributed.process_max(int(inexact))),
        dtype=np.dtype(np.float64 if distributed.process_max(int(wide)) else np.float32),
    )


def _scaling(family: LinearLogitFamily, scan: _Scan, what: str) -> ScoreScaling:
    """The transform ``fit`` would choose (``_scaling.fit_scaling`` on the range; float32
    shifts: module docstring)."""
    pair = np.array([scan.lo, scan.hi])
    dtype = scan.dtype
    scaling, _ = fit_scaling(
        pair,
        np.ones(2),
        shift=family.shift_equivariant,
        scale=family.scale_equivariant,
        need_spread=True,
        what=what,
        dtype=dtype,
    )
    lo, hi = pair
    narrow = (lo > 0 and hi <= _SHIFT_RATIO * lo) or (hi < 0 and lo >= _SHIFT_RATIO * hi)
    shifted = bool(np.any(np.asarray(scaling.shift)))
    if scan.inexact and family.shift_equivariant and narrow and not shifted:
        k = _exponent(np.array([hi - lo]), np.finfo(dtype).maxexp // ARITHMETIC)
        c = np.ldexp(lo, -k).astype(dtype)  # within float32 rounding of lo: exact (Sterbenz)
        shift, exponent = jax.device_put((c[0], k[0].astype(np.int32)))
        scaling = ScoreScaling(shift=shift, exponent=exponent)
    return scaling


def fit_chunks(estimator: Any, source: Any, *, loss: str = "naive") -> Any:
    """``estimator.fit_chunks(source, loss=...)`` (see ``LinearCalibratorEstimator``).

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.calibrators._linear_chunks import fit_chunks
        >>> s, y = np.array([-1.0, -0.5, 0.2, 0.4, 1.0]), np.array([0, 1, 0, 1, 1])
        >>> fitted = fit_chunks(jaxcal.PlattScaling(), [(s[:2], y[:2]), (s[2:], y[2:])])
        >>> bool(np.allclose(fitted.theta, jaxcal.PlattScaling().fit(s, y).theta, rtol=1e-4))
        True
    """
    estimator._check_hyperparameters()
    what = f"{type(estimator).__name__}.fit_chunks"
    if estimator.method != "discriminative":
        raise ValueError(
            f"{what} fits method='discriminative' only; got method={estimator.method!r} "
            "(a generative fit needs its own sufficient statistics: fit it in memory)."
        )
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}; got {loss!r}.")
    read = chunk_source(source)

    def checked(check: bool = True) -> Iterator[tuple[np.dtype, Chunk]]:
        for k, raw in enumerate(read()):
            c = read_chunk(raw, k, loss=loss, check=check)
            if c is not None:  # a valid chunk: a mapping with scores, or a tuple
                yield fit_dtype(raw["scores"] if isinstance(raw, Mapping) else raw[0]), c

    scan = _scan(checked)
    family = estimator.family
    # every family check depends on the smallest and largest score alone (module docstring)
    estimator._check_scores(np.array([scan.lo, scan.hi]), np.ones(2), scan.dtype)
    scaling = _scaling(family, scan, what)
    dtype = scan.dtype
    lo, hi = np.asarray(scaling.apply(np.array([scan.lo, scan.hi])), dtype)
    ctx = ScoreRange(jnp.asarray(lo), jnp.asarray(hi))

    # the scan checked every value; later passes check shapes (and the row count) only
    transform = (lambda s: s) if scaling.is_identity() else scaling.apply

    def prepared() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for _, c in checked(check=False):
            t, w = targets_weights(c, loss=loss, kappa=scan.kappa)
            yield transform(c.scores), t, w

    theta, status, _ = fit_linear_streamed(
        family,
        prepared,
        ctx,
        estimator.l2,
        max_iter=int(estimator.max_iter),
        tol=default_tol(dtype) if estimator.tol is None else estimator.tol,
        chunk_rows=padded_size(scan.chunk_rows),
        rows=scan.rows,
    )
    warn_if_not_converged(status, what)
    return estimator._make(theta, ctx, status, scaling)
