r"""Per-rank isotonic calibration of click models (Borisov, Kiseleva, Markov & de Rijke,
"Calibration: A Simple Way to Improve Click Models", CIKM 2018).

For every rank :math:`r`, fit on a development log the isotonic (non-decreasing) map
:math:`g_r` that minimises (Borisov et al., Eq. 3)

.. math::  \sum_i w_i \, [g_r(P_r(s^i)) - c_r^i]^2,

from the model's predicted click probability at rank :math:`r` to the observed click, by
exact weighted pool-adjacent-violators: one :class:`jaxcal.IsotonicCalibration` per rank,
whose knots become that rank's map. The fitted values are trimmed to
:math:`[\delta, 1 - \delta]` (:math:`\delta = 0.01` in the paper, the calibrator's
``trim``) so that perplexity stays finite; clipping the isotonic solution is the exact
solution of the bounded problem. New probabilities are mapped by linear interpolation between
the knots (the paper's "piecewise linear, isotonic, continuous" :math:`g`; scikit-learn's
``IsotonicRegression``), and by the end values outside the development range (scikit-learn's
``out_of_bounds="clip"``; the paper returns 0 below the range, which trimming turns into
:math:`\delta`). Reliability diagrams per rank (the paper's Fig. 1) are
:func:`jaxcal.clicks.metrics.reliability_by_rank`, drawn by
:func:`jaxcal.plot.reliability_by_rank_diagram`.

Conditional :math:`P(C_r = 1 \mid C_{<r})` and unconditional :math:`P(C_r = 1)` probabilities
are calibrated separately (paper, footnote 4): :func:`calibrate_click_model` fits both and
returns a :class:`CalibratedClickModel`.

The PAV solution is also the isotonic maximum-likelihood estimate for Bernoulli outcomes
(Robertson, Wright & Dykstra 1988, Thm. 1.5.1), so on the development log itself the
calibrated perplexity at each rank is never above that of any monotone map into
:math:`[\delta, 1 - \delta]`, e.g. the model's own probabilities clipped to that range.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.calibrators import IsotonicCalibration
from jaxcal.clicks._checks import check_click_arrays, check_sessions
from jaxcal.clicks._fitted import ClickModelFit
from jaxcal.clicks.sessions import Sessions

__all__ = [
    "RankCalibration",
    "FittedRankCalibration",
    "CalibratedClickModel",
    "calibrate_click_model",
]


@pytree_dataclass
class FittedRankCalibration:
    """Per-rank monotone maps (immutable pytree; ``save`` / ``jaxcal.load``).

    Attributes:
        knots_x: ``[n, K]`` strictly increasing knot positions per rank (padded beyond the
            last real knot with positions above 1 carrying the last value).
        knots_y: ``[n, K]`` non-decreasing calibrated probabilities at the knots.
        trim: the ``delta`` of the trimming to ``[delta, 1 - delta]``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import FittedRankCalibration, RankCalibration
        >>> probs = np.array([[0.1, 0.2], [0.4, 0.3], [0.8, 0.6], [0.9, 0.7]])
        >>> clicks = np.array([[0, 0], [1, 0], [0, 1], [1, 1]])
        >>> fitted = RankCalibration().fit(probs, clicks)
        >>> isinstance(fitted, FittedRankCalibration), fitted.knots_x.shape[0]  # 2 ranks
        (True, 2)
    """

    knots_x: jax.Array
    knots_y: jax.Array
    trim: float = static_field(default=0.01)

    @property
    def n_results(self) -> int:
        """Number of ranks with a map.

        Example:
            >>> import numpy as np
            >>> from jaxcal.clicks import RankCalibration
            >>> probs = np.array([[0.2, 0.1, 0.3], [0.6, 0.5, 0.4]])
            >>> RankCalibration().fit(probs, [[0, 0, 1], [1, 0, 0]]).n_results
            3
        """
        return int(self.knots_x.shape[0])

    def predict(self, probs: ArrayLike) -> jax.Array:
        """Calibrated ``[S, n]`` probabilities: ``g_r(probs[:, r])`` for every rank ``r``.

        Traceable (usable inside ``jit``); ``probs`` may have fewer ranks than the map.

        Args:
            probs: ``[S, n]`` click probabilities of the kind the maps were fitted on.

        Returns:
            ``[S, n]`` calibrated probabilities.

        Raises:
            ValueError: for ``probs`` that are not ``[S, n]`` with ``n <= n_results``.

        Example:
            >>> import numpy as np
            >>> from jaxcal.clicks import RankCalibration
            >>> probs = np.array([[0.1], [0.3], [0.6], [0.9]])
            >>> fitted = RankCalibration(trim=0.0).fit(probs, [[0], [1], [0], [1]])
            >>> fitted.predict(np.array([[0.05], [0.45], [0.95]])).tolist()  # PAV pools 0.3, 0.6
            [[0.0], [0.5], [1.0]]
        """
        return _apply_maps(self, probs, None)


def _rank_knots(x: np.ndarray, y: np.ndarray, w: np.ndarray, trim: float):
    """Knots ``(u, v)`` of one rank's trimmed isotonic map: a fitted
    :class:`jaxcal.IsotonicCalibration`'s; the identity (trimmed) for a rank without data,
    and the constant click rate (trimmed) for a rank whose clicks are all 0 or all 1."""
    lo, hi = trim, 1.0 - trim
    if x.size == 0:
        return np.array([lo, hi]), np.array([lo, hi])
    if y.min() == y.max():  # one class: isotonic regression fits the constant
        u = np.unique(x[[np.argmin(x), np.argmax(x)]])
        return u, np.full(u.shape, np.clip(y[0], lo, hi))
    fitted = IsotonicCalibration(trim=trim).fit(x, y, sample_weight=w)
    u, v = np.asarray(fitted.knots_x, np.float64), np.asarray(fitted.knots_y, np.float64)
    # trimming can give neighbouring blocks one value: keep the ends of each flat stretch
    flat = v[1:] == v[:-1]
    keep = ~(np.r_[False, flat] & np.r_[flat, False])
    return u[keep], v[keep]


def _stack_knots(per_rank: list[tuple[np.ndarray, np.ndarray]], trim: float):
    """One ``[n, K]`` table of knots per rank, ``K`` the bucket size of the most knots: the
    rows are padded above 1 (strictly increasing, carrying the last value: exact for
    probabilities), so calibrations with different knot counts share compiled programs."""
    K = _shapes.padded_size(max(len(u) for u, _ in per_rank))
    kx = np.empty((len(per_rank), K))
    ky = np.empty((len(per_rank), K))
    for r, (u, v) in enumerate(per_rank):
        k = len(u)
        kx[r, :k], ky[r, :k] = u, v
        kx[r, k:] = max(u[-1], 1.0) + np.arange(1, K - k + 1)
        ky[r, k:] = v[-1]
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    return FittedRankCalibration(
        knots_x=jax.device_put(kx.astype(dtype)),
        knots_y=jax.device_put(ky.astype(dtype)),
        trim=trim,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankCalibration:
    """Per-rank isotonic calibration (Borisov et al. 2018, Sec. 3; module docstring).

    Args:
        trim: trim calibrated probabilities to ``[trim, 1 - trim]`` (paper: 0.01).

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import RankCalibration
        >>> rng = np.random.default_rng(0)
        >>> probs = rng.uniform(size=(500, 3))
        >>> clicks = (rng.uniform(size=(500, 3)) < probs**2).astype(int)
        >>> cal = RankCalibration().fit(probs, clicks)
        >>> cal.predict(probs).shape
        (500, 3)
        >>> RankCalibration(trim=0.5)
        Traceback (most recent call last):
        ...
        ValueError: trim must lie in [0, 0.5); got 0.5.
    """

    trim: float = 0.01

    def __post_init__(self) -> None:
        ok = isinstance(self.trim, int | float | np.integer | np.floating)
        if isinstance(self.trim, bool) or not (ok and 0.0 <= self.trim < 0.5):
            raise ValueError(f"trim must lie in [0, 0.5); got {self.trim!r}.")

    def fit(
        self,
        probs: ArrayLike,
        clicks: ArrayLike,
        mask: ArrayLike | None = None,
        *,
        sample_weight: ArrayLike | None = None,
    ) -> FittedRankCalibration:
        """Fit one isotonic map per rank on development predictions.

        Args:
            probs: ``[S, n]`` predicted click probabilities (conditional or marginal).
            clicks: ``[S, n]`` observed clicks.
            mask: ``[S, n]`` real results (default all).
            sample_weight: ``[S]`` session multiplicities (default 1).

        Returns:
            :class:`FittedRankCalibration`. A rank without development data gets the
            identity map, and one whose clicks are all 0 (or all 1) the constant 0 (or 1),
            trimmed.

        Raises:
            ValueError: on shape mismatches, probabilities outside [0, 1], clicks not 0/1,
                or bad weights.

        Example:
            >>> import numpy as np
            >>> from jaxcal.clicks import RankCalibration
            >>> probs = np.array([[0.1, 0.5], [0.3, 0.5], [0.6, 0.5]])
            >>> clicks = np.array([[0, 1], [1, 1], [1, 1]])  # rank 2 always clicked
            >>> fitted = RankCalibration(trim=0.01).fit(probs, clicks)
            >>> fitted.predict(probs)[:, 1].tolist()  # all ones, trimmed to 0.99
            [0.99, 0.99, 0.99]
        """
        trim = float(self.trim)
        p, c, m, w = check_click_arrays(probs, clicks, mask, sample_weight)
        sel = m & (w[:, None] > 0)
        per_rank = [
            _rank_knots(p[sel[:, r], r], c[sel[:, r], r], w[sel[:, r]], trim)
            for r in range(p.shape[1])
        ]
        return _stack_knots(per_rank, trim)


@jit
def _calibrated(probs, knots_x, knots_y, mask):
    """Per-rank maps of ``[S, n]`` probabilities, 0 where ``mask`` is ``False``."""
    n = probs.shape[1]
    kx, ky = knots_x[:n].astype(probs.dtype), knots_y[:n].astype(probs.dtype)
    out = jax.vmap(jnp.interp, in_axes=(1, 0, 0), out_axes=1)(probs, kx, ky)
    return jnp.where(mask, out, 0.0)


def _apply_maps(calibration: FittedRankCalibration, probs: ArrayLike, mask) -> jax.Array:
    """``calibration`` applied to ``[S, n]`` probabilities (0 where ``mask`` is ``False``);
    concrete inputs go through one compiled call per bucket of ``S`` (padded rows)."""
    if _shapes.is_traced(probs, calibration):
        p = jnp.asarray(probs)
        m = jnp.ones(p.shape, bool) if mask is None else mask
    else:
        p = np.asarray(probs)
        m = np.ones(p.shape, bool) if mask is None else np.asarray(mask, bool)
    if p.ndim != 2 or p.shape[1] > calibration.n_results:
        raise ValueError(
            f"probs must be [S, n] with n <= {calibration.n_results} ranks; got shape {p.shape}."
        )
    if isinstance(p, jax.Array):
        return _calibrated(p, calibration.knots_x, calibration.knots_y, m)
    S = p.shape[0]
    p, m = _shapes.pad_rows(_shapes.padded_size(S, total=p.size), p, m)
    return _shapes.unpad(_calibrated(p, calibration.knots_x, calibration.knots_y, m), S)


@pytree_dataclass
class CalibratedClickModel:
    """A click model with per-rank calibration of its conditional and marginal predictions.

    Attributes:
        model: the fitted click model.
        conditional: :class:`FittedRankCalibration` of ``P(C_r = 1 | C_<r)``.
        marginal: :class:`FittedRankCalibration` of ``P(C_r = 1)``.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import CalibratedClickModel, PBM, Sessions, calibrate_click_model
        >>> log = Sessions.from_arrays([0, 0, 1], [[1, 2], [2, 1], [1, 2]],
        ...                            [[1, 0], [0, 0], [1, 1]])
        >>> cal = calibrate_click_model(PBM().fit(log, max_iter=5), log)
        >>> isinstance(cal, CalibratedClickModel), cal.marginal.n_results
        (True, 2)
    """

    model: Any
    conditional: FittedRankCalibration
    marginal: FittedRankCalibration

    def predict_conditional(self, sessions: Sessions) -> jax.Array:
        """Calibrated ``P(C_r = 1 | C_<r)``, ``[S, n]`` (0 on padded positions).

        Example:
            >>> from jaxcal.clicks import CascadeModel, Sessions, calibrate_click_model
            >>> log = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [0, 1]])
            >>> cal = calibrate_click_model(CascadeModel().fit(log), log)
            >>> cal.predict_conditional(log).shape
            (2, 2)
        """
        s = check_sessions(sessions)
        return _apply_maps(self.conditional, self.model.predict_conditional(s), s.mask)

    def predict_marginal(self, sessions: Sessions) -> jax.Array:
        """Calibrated ``P(C_r = 1)``, ``[S, n]`` (0 on padded positions).

        Example:
            >>> from jaxcal.clicks import GCTR, Sessions, calibrate_click_model
            >>> log = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [1, 0]])
            >>> cal = calibrate_click_model(GCTR().fit(log), log)  # one value, one bucket
            >>> cal.predict_marginal(log).tolist()  # each rank's click rate, trimmed
            [[0.99, 0.01], [0.99, 0.01]]
        """
        s = check_sessions(sessions)
        return _apply_maps(self.marginal, self.model.predict_marginal(s), s.mask)


def calibrate_click_model(
    model: ClickModelFit, dev: Sessions, *, trim: float = 0.01
) -> CalibratedClickModel:
    """Fit per-rank isotonic maps of a fitted click model's conditional and marginal
    predictions on a development log (Borisov et al. 2018).

    Args:
        model: a fitted click model (``jaxcal.clicks.DBN().fit(train)``, ...).
        dev: the development log (not used to train ``model``).
        trim: trimming ``delta`` in ``[0, 0.5)`` (default 0.01, as in the paper).

    Returns:
        :class:`CalibratedClickModel` (``predict_conditional`` / ``predict_marginal``).

    Example:
        >>> import jax
        >>> from jaxcal.clicks import DBN, simulate, example_params, calibrate_click_model
        >>> p = example_params("DBN", key=jax.random.key(0))
        >>> train = simulate("DBN", p, 1000, key=jax.random.key(0))
        >>> dev = simulate("DBN", p, 1000, key=jax.random.key(1))
        >>> cal = calibrate_click_model(DBN().fit(train, prior=(1, 10)), dev)
        >>> cal.predict_marginal(dev).shape  # [sessions, ranks]
        (1000, 10)
    """
    rc = RankCalibration(trim=trim)
    if not isinstance(model, ClickModelFit):
        raise ValueError(f"model must be a fitted click model; got {type(model).__name__}.")
    dev = check_sessions(dev, name="dev")
    kw = {"mask": dev.mask, "sample_weight": dev.weight}
    return CalibratedClickModel(
        model=model,
        conditional=rc.fit(model.predict_conditional(dev), dev.clicks, **kw),
        marginal=rc.fit(model.predict_marginal(dev), dev.clicks, **kw),
    )
