r"""Per-rank isotonic calibration of click models (Borisov, Kiseleva, Markov & de Rijke,
"Calibration: A Simple Way to Improve Click Models", CIKM 2018).

For every rank :math:`r`, fit on a development log the isotonic (non-decreasing) map
:math:`g_r` that minimises (Borisov et al., Eq. 3)

.. math::  \sum_i w_i \, [g_r(P_r(s^i)) - c_r^i]^2,

from the model's predicted click probability at rank :math:`r` to the observed click, by
exact weighted pool-adjacent-violators (:func:`jaxcal.calibrators.isotonic_regression`, all
ranks in one call with ``group = rank``). The fitted values are trimmed to
:math:`[\delta, 1 - \delta]` (:math:`\delta = 0.01` in the paper) so that perplexity stays
finite; clipping the isotonic solution is the exact solution of the bounded problem. New
probabilities are mapped by linear interpolation between the fitted points (the paper's
"piecewise linear, isotonic, continuous" :math:`g`; scikit-learn's ``IsotonicRegression``),
and by the end values outside the development range (scikit-learn's ``out_of_bounds="clip"``;
the paper returns 0 below the range, which trimming turns into :math:`\delta`).

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
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.calibrators import isotonic_regression
from jaxcal.clicks._base import ClickModelFit, check_sessions
from jaxcal.clicks.sessions import Sessions

__all__ = [
    "RankCalibration",
    "FittedRankCalibration",
    "CalibratedClickModel",
    "calibrate_click_model",
    "ReliabilityByRank",
    "reliability_by_rank",
    "plot_reliability_by_rank",
]


def _check_probs_clicks(probs, clicks, mask, sample_weight):
    p = np.asarray(probs, np.float64)
    if p.ndim != 2 or p.size == 0:
        raise ValueError(f"probs must be a non-empty [S, n] array; got shape {p.shape}.")
    c = np.asarray(clicks)
    if c.shape != p.shape:
        raise ValueError(f"shape mismatch: probs {p.shape} but clicks {c.shape}.")
    m = np.ones(p.shape, bool) if mask is None else np.asarray(mask).astype(bool)
    if m.shape != p.shape:
        raise ValueError(f"shape mismatch: probs {p.shape} but mask {m.shape}.")
    if not m.any():
        raise ValueError("mask selects no results.")
    pm = p[m]
    if not np.isfinite(pm).all() or (pm < 0).any() or (pm > 1).any():
        raise ValueError("probs must be finite probabilities in [0, 1] on unmasked entries.")
    if not np.isin(c[m], (0, 1)).all():
        raise ValueError(f"clicks must be 0/1; got values {np.unique(c[m])[:5].tolist()}.")
    w = np.ones(p.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64)
    if w.shape != (p.shape[0],) or not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"sample_weight must be [{p.shape[0]}] finite and non-negative.")
    if not (w[:, None] * m).sum() > 0:
        raise ValueError("sample_weight gives the unmasked results zero total weight.")
    return p, c.astype(np.float64), m, w


@pytree_dataclass
class FittedRankCalibration:
    """Per-rank monotone maps (immutable pytree; ``save`` / ``jaxcal.load``).

    Attributes:
        knots_x: ``[n, K]`` strictly increasing knot positions per rank (padded beyond the
            last real knot with positions above 1 carrying the last value).
        knots_y: ``[n, K]`` non-decreasing calibrated probabilities at the knots.
        trim: the ``delta`` of the trimming to ``[delta, 1 - delta]``.
    """

    knots_x: jax.Array
    knots_y: jax.Array
    trim: float = static_field(default=0.01)

    @property
    def n_results(self) -> int:
        """Number of ranks with a map."""
        return int(self.knots_x.shape[0])

    def apply(self, probs: ArrayLike) -> jax.Array:
        """Calibrated ``[S, n]`` probabilities: ``g_r(probs[:, r])`` for every rank ``r``.

        Traceable (usable inside ``jit``); ``probs`` may have fewer ranks than the map.
        """
        return _apply_maps(self, probs, None)


def _knots(x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots of one rank's fitted isotonic function: the first and last point of every
    constant block (scikit-learn's thresholds), so linear interpolation reproduces the fit."""
    order = np.argsort(x, kind="stable")
    x, v = x[order], v[order]
    ux, first = np.unique(x, return_index=True)
    uv = v[first]  # ties share one fitted value
    change_prev = np.r_[True, uv[1:] != uv[:-1]]
    change_next = np.r_[uv[1:] != uv[:-1], True]
    keep = change_prev | change_next
    return ux[keep], uv[keep]


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
        >>> cal.apply(probs).shape
        (500, 3)
    """

    trim: float = 0.01

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
            identity map (trimmed).

        Raises:
            ValueError: on shape mismatches, probabilities outside [0, 1], clicks not 0/1,
                bad weights, or ``trim`` outside ``[0, 0.5)``.
        """
        trim = float(self.trim)
        if not 0.0 <= trim < 0.5:
            raise ValueError(f"trim must lie in [0, 0.5); got {self.trim!r}.")
        p, c, m, w = _check_probs_clicks(probs, clicks, mask, sample_weight)
        S, n = p.shape
        ww = np.broadcast_to(w[:, None], (S, n))
        sel = m & (ww > 0)
        rank = np.broadcast_to(np.arange(n), (S, n))[sel]
        x, y, sw = p[sel], c[sel], ww[sel]
        fitted = np.asarray(
            isotonic_regression(x, y, sample_weight=sw, group=rank, y_min=trim, y_max=1.0 - trim),
            np.float64,
        )
        per_rank = []
        for r in range(n):
            at = rank == r
            if at.any():
                per_rank.append(_knots(x[at], fitted[at]))
            else:
                lo, hi = max(trim, 0.0), min(1.0 - trim, 1.0)
                per_rank.append((np.array([lo, hi]), np.array([lo, hi])))
        # knots padded to their bucket size (above 1, carrying the last value: exact for
        # probabilities), so that calibrations of different sizes share compiled programs
        K = _shapes.padded_size(max(len(k[0]) for k in per_rank))
        kx = np.empty((n, K))
        ky = np.empty((n, K))
        for r, (ux, uv) in enumerate(per_rank):
            k = len(ux)
            kx[r, :k], ky[r, :k] = ux, uv
            kx[r, k:] = max(ux[-1], 1.0) + np.arange(1, K - k + 1)  # strictly increasing pad
            ky[r, k:] = uv[-1]
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        return FittedRankCalibration(
            knots_x=jax.device_put(kx.astype(dtype)),
            knots_y=jax.device_put(ky.astype(dtype)),
            trim=trim,
        )


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
    """

    model: Any
    conditional: FittedRankCalibration
    marginal: FittedRankCalibration

    def predict_conditional(self, sessions: Sessions) -> jax.Array:
        """Calibrated ``P(C_r = 1 | C_<r)``, ``[S, n]`` (0 on padded positions)."""
        s = check_sessions(sessions)
        return _apply_maps(self.conditional, self.model.predict_conditional(s), s.mask)

    def predict_marginal(self, sessions: Sessions) -> jax.Array:
        """Calibrated ``P(C_r = 1)``, ``[S, n]`` (0 on padded positions)."""
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
        trim: trimming ``delta`` (default 0.01, as in the paper).

    Returns:
        :class:`CalibratedClickModel` (``predict_conditional`` / ``predict_marginal``).

    Example:
        >>> import jax
        >>> from jaxcal.clicks import DBN, simulate, example_params, calibrate_click_model
        >>> p = example_params("DBN")
        >>> train = simulate("DBN", p, 3000, key=jax.random.key(0))
        >>> dev = simulate("DBN", p, 1000, key=jax.random.key(1))
        >>> cal = calibrate_click_model(DBN().fit(train, prior=(1, 10)), dev)
        >>> cal.predict_marginal(dev).shape
        (1000, 10)
    """
    if not isinstance(model, ClickModelFit):
        raise ValueError(f"model must be a fitted click model; got {type(model).__name__}.")
    dev = check_sessions(dev, name="dev")
    rc = RankCalibration(trim=trim)
    kw = {"mask": dev.mask, "sample_weight": dev.weight}
    return CalibratedClickModel(
        model=model,
        conditional=rc.fit(model.predict_conditional(dev), dev.clicks, **kw),
        marginal=rc.fit(model.predict_marginal(dev), dev.clicks, **kw),
    )


# ---------------------------------------------------------------------------- reliability
class ReliabilityByRank(NamedTuple):
    """Per-rank reliability diagram: ``[n, n_bins]`` arrays.

    ``mean_pred``: weighted mean predicted probability in the bucket; ``ctr``: observed
    click-through rate; ``count``: total weight (NaN means where a bucket is empty).
    """

    mean_pred: np.ndarray
    ctr: np.ndarray
    count: np.ndarray


def reliability_by_rank(
    probs: ArrayLike,
    clicks: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    sample_weight: ArrayLike | None = None,
    n_bins: int = 100,
) -> ReliabilityByRank:
    """Reliability diagram per rank (Borisov et al. 2018, Fig. 1): bucket ``i`` holds the
    predictions in ``[i / N, (i + 1) / N)`` (the last one includes 1).

    Raises:
        ValueError: on bad probabilities / clicks / weights, or ``n_bins < 1``.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    p, c, m, w = _check_probs_clicks(probs, clicks, mask, sample_weight)
    rows = _shapes.padded_size(p.shape[0], total=p.size)
    p, c, m, w = _shapes.pad_rows(rows, p, c, m, w)  # padded rows: masked, weight 0
    out = _reliability(p, c, m, w, n_bins)
    count, psum, csum = (np.asarray(a, np.float64) for a in out)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.where(count > 0, psum / count, np.nan)
        ctr = np.where(count > 0, csum / count, np.nan)
    return ReliabilityByRank(mean_pred, ctr, count)


@jit(static_argnames=("n_bins",))
def _reliability(p, c, m, w, n_bins):
    S, n = p.shape
    b = jnp.clip(jnp.floor(p * n_bins).astype(jnp.int32), 0, n_bins - 1)
    seg = (jnp.arange(n)[None, :] * n_bins + b).reshape(-1)
    wm = jnp.where(m, w[:, None], 0.0).reshape(-1)

    def total(v):
        return jax.ops.segment_sum(v, seg, num_segments=n * n_bins).reshape(n, n_bins)

    return total(wm), total(wm * p.reshape(-1)), total(wm * c.reshape(-1))


def plot_reliability_by_rank(
    diagrams: dict[str, ReliabilityByRank] | ReliabilityByRank,
    path: str | os.PathLike,
    *,
    ranks: tuple[int, ...] = (1, 3, 5),
    title: str | None = None,
) -> None:
    """Write a PNG with one panel per rank (1-based ``ranks``): observed CTR against the
    predicted probability per bucket, for one or several named diagrams (e.g.
    ``{"uncalibrated": ..., "calibrated": ...}``), with the diagonal.

    Raises:
        ImportError: when matplotlib is not installed (the optional ``plot`` extra).
        ValueError: on ranks outside the diagram.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from exc
    if isinstance(diagrams, ReliabilityByRank):
        diagrams = {"model": diagrams}
    n = next(iter(diagrams.values())).ctr.shape[0]
    bad = [r for r in ranks if not 1 <= r <= n]
    if bad:
        raise ValueError(f"ranks must lie in 1..{n}; got {bad}.")
    fig = Figure(figsize=(4.0 * len(ranks), 4.0))
    FigureCanvasAgg(fig)
    for i, r in enumerate(ranks):
        ax = fig.add_subplot(1, len(ranks), i + 1)
        ax.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--")
        for name, d in diagrams.items():
            ok = d.count[r - 1] > 0
            ax.plot(d.mean_pred[r - 1][ok], d.ctr[r - 1][ok], marker="o", ms=3, lw=1, label=name)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted click probability")
        ax.set_ylabel("observed CTR" if i == 0 else "")
        ax.set_title(f"rank {r}")
        if i == 0:
            ax.legend(loc="upper left", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=100)
