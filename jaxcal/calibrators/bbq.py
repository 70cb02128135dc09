r"""Bayesian Binning into Quantiles (BBQ; Naeini, Cooper & Hauskrecht, AAAI 2015).

BBQ averages equal-frequency histogram models :math:`M_B` over a range of bin counts
:math:`B \in \{\lfloor N^{1/3} / C \rfloor, \dots, \lceil C N^{1/3} \rceil\}` (clipped to
``[1, N]``; the paper uses :math:`C = 10`). Each model is scored by its Bayesian (BDeu)
marginal likelihood with equivalent sample size :math:`N'` (default 2) and a Beta prior per
bin centred on the bin's mid score :math:`p_b`, :math:`\alpha_b = \tfrac{N'}{B} p_b`,
:math:`\beta_b = \tfrac{N'}{B}(1 - p_b)`:

.. math::  \log P(D \mid M_B) = \sum_{b=1}^{B} \Big[
    \log\Gamma(\tfrac{N'}{B}) - \log\Gamma(N_b + \tfrac{N'}{B})
    + \log\Gamma(m_b + \alpha_b) - \log\Gamma(\alpha_b)
    + \log\Gamma(n_b + \beta_b) - \log\Gamma(\beta_b) \Big],

with :math:`N_b` the (weighted) count in bin :math:`b`, :math:`m_b` its positives and
:math:`n_b = N_b - m_b`. With a uniform prior over models the prediction is

.. math::  P(y = 1 \mid s) = \sum_B \frac{e^{\ell_B}}{\sum_{B'} e^{\ell_{B'}}}\,
    \frac{m_{b(s)} + \alpha_{b(s)}}{N_{b(s)} + N'/B},
    \qquad \ell_B = \log P(D \mid M_B),

where the normalised weights are computed by ``logsumexp`` (never exponentiating a summed
log-likelihood). All models are evaluated at once, one entry per (model, bin) pair, from one
sort and two cumulative sums: ``O(N log N + \sum_B B)``. The weighted average of the models
is one step map over the union of their edges (every edge is a sorted training score, so a
difference array over sorted positions and a cumulative sum build it without another sort):
prediction is one binary search per score, ``O(log N)``.

Choices: bins are equal-frequency in the *sorted training scores* with ties kept in one bin
(a tied sample can give empty bins, which contribute a factor 1). The prior mean
:math:`p_b` of a bin depends on ``score_scale``:

* ``"probability"`` (the paper's; ``"auto"`` when every training score lies in [0, 1]):
  the midpoint of the bin's score interval, the outer bins reaching to 0 and 1.
* ``"rank"`` (``"auto"`` for any other scores): the training base rate
  :math:`\pi = \sum_i w_i t_i / \sum_i w_i` in every bin. The scores then enter through
  their order alone, so the fit is the same for any strictly increasing transform of the
  scores (``s * 1e20``, ``s * 1e-20``, ``s + c``, ...), as a map of scores without a
  probability scale should be: predictions at corresponding points are equal.
* ``"logit"`` (asked for explicitly: the scores are logits): :math:`p_b =
  \sigma(\text{midpoint})`, the outer bins reaching to the training min / max. The prior
  then reads the scores' units, so rescaled logits give another fit.

Loss-weighted targets enter the Beta-binomial counts as weighted sums: bin :math:`b` has
:math:`N_b = \sum w_i` and :math:`m_b = \min(\sum w_i t_i, N_b)`, so under the IPS loss
(:math:`t_i = Y_i / \omega_i`) a click counts :math:`1/\omega_i` times; the clip acts per
bin, not per sample (a per-sample clip would turn IPS back into the naive fit).

**Inside jit.** On traced inputs (inside a caller's ``jit``, ``vmap`` or ``grad``), ``fit``
is the pure fit (:meth:`~jaxcal.calibrators.Calibrator.fit_pure`): the set of models depends
on ``N`` alone, a static shape, so all of them are scored at once as above, and the ensemble
table is built in the program over all ``N`` sorted training scores (``table_edges`` has
``N`` entries, a position without an edge repeating the value before it) instead of the
distinct edges. The numbers are the eager fit's. With ``score_scale="auto"`` the choice of
scale is made in the program (per problem under ``vmap``); ``score_scale``, a static field
of the fitted map, then reads ``"auto"``. The posterior means, the marginal likelihoods and
the weights are smooth in the targets and weights (``N_b``, ``m_b`` are sums), so ``jvp`` /
``grad`` with respect to the labels, propensities and weights are exact away from the clip
:math:`m_b \le N_b`; the dependence on the training scores goes through the bins (piecewise
constant: zero derivative) and, for the ``"probability"`` and ``"logit"`` priors, through
the bins' mid scores (smooth).

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=5000)
    >>> y = (rng.uniform(size=5000) < p ** 2).astype(int)
    >>> cal = jaxcal.BBQ().fit(p, y)
    >>> probs = cal.predict(np.array([0.1, 0.5, 0.9]))  # close to 0.01, 0.25, 0.81
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import FitData, PureFitData, poison
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._scan import cummax, cumsum, presort
from jaxcal._validation import check_real
from jaxcal.calibrators._base import Calibrator, FittedCalibrator, check_choice
from jaxcal.calibrators._scaling import (
    ORDER,
    ScoreScaling,
    _ldexp_traced,
    fit_scaling,
    identity_scaling,
    pure_identity_scaling,
)
from jaxcal.calibrators.histogram import step_map

__all__ = ["BBQ", "FittedBBQ", "bbq_bin_counts"]

_SCORE_SCALES = ("auto", "probability", "rank", "logit")


def bbq_bin_counts(n: int, c: float) -> np.ndarray:
    r"""The bin counts :math:`B` of the BBQ models for ``n`` training points.

    Example:
        >>> from jaxcal.calibrators.bbq import bbq_bin_counts
        >>> bbq_bin_counts(27, 1.5).tolist()  # N^(1/3) = 3: from 3 / 1.5 to 3 * 1.5
        [2, 3, 4, 5]
    """
    root = n ** (1.0 / 3.0)
    lo = max(1, int(np.floor(root / c)))
    hi = max(lo, min(n, int(np.ceil(c * root))))
    return np.arange(lo, hi + 1)


_SHIFT = 8  # log_gamma's recurrence shifts arguments to at least this
_HALF_LOG_2PI = 0.9189385332046727


def log_gamma(x: jax.Array) -> jax.Array:
    r""":math:`\log\Gamma(x)` for :math:`x > 0`, in about a third of the time of
    ``jax.scipy.special.gammaln`` on CPU (no reflection for negative arguments, one
    division): the recurrence :math:`\log\Gamma(x) = \log\Gamma(x + k) - \log(x (x + 1)
    \cdots (x + k - 1))` brings the argument to :math:`z = x + k \ge 8`, where Stirling's
    series up to :math:`z^{-9}` is within :math:`3 \times 10^{-13}` (its next term,
    :math:`691 / (360360 z^{11})`).

    Example:
        >>> import jax.numpy as jnp; from jaxcal.calibrators.bbq import log_gamma
        >>> log_gamma(jnp.array([1.0, 5.0])).round(5).tolist()  # log 0! and log 4! = log 24
        [0.0, 3.17805]
    """
    z, product = x, jnp.ones_like(x)
    for _ in range(_SHIFT):  # lax.select: jnp.where would trace a nested program each time
        small = z < _SHIFT
        product = jax.lax.select(small, product * z, product)
        z = jax.lax.select(small, z + 1, z)
    r = 1 / z
    r2 = r * r
    series = r * (1 / 12 - r2 * (1 / 360 - r2 * (1 / 1260 - r2 * (1 / 1680 - r2 / 1188))))
    return (z - 0.5) * jnp.log(z) - z + _HALF_LOG_2PI + series - jnp.log(product)


def _slots(n_bins: np.ndarray, size: int, c: float) -> tuple[int, int]:
    """How many models and (model, bin) pairs the program holds: bounds that hold for every
    ``n`` of the bucket of ``size`` points (no model has more bins than ``B_top``, the
    largest count at ``size`` points), so that one program serves the whole bucket; the
    exact counts when padding is off."""
    if not _shapes.padding_enabled():
        return n_bins.shape[0], int(n_bins.sum())
    top = int(bbq_bin_counts(size, c)[-1])
    return _shapes.padded_size(top), _shapes.padded_size(top * (top + 1) // 2)


class _Layout(NamedTuple):
    """Host arrays of the (model, bin) pairs, model by model, padded to the pair slots:
    what depends on ``n`` and the bin counts only (integer arithmetic, exact in NumPy)."""

    model: np.ndarray  # the pair's model (the model count on padding)
    bin_index: np.ndarray  # its bin within the model (0 on padding)
    n_bins: np.ndarray  # its model's bin count B (1 on padding)
    pos_lo: np.ndarray  # the sorted position of its lower edge (equal-frequency cut)
    pos_hi: np.ndarray  # ... and of the next bin's
    has_lo: np.ndarray  # whether it has a lower edge (not the model's first bin)
    has_hi: np.ndarray  # whether it has an upper edge (not the model's last bin)


def _model_layout(n_bins: np.ndarray, n: int, size: int) -> _Layout:
    """The pair layout of the models with ``n_bins`` bins over ``n`` sorted points."""
    model = np.repeat(np.arange(n_bins.shape[0]), n_bins)
    first = np.repeat(np.cumsum(n_bins) - n_bins, n_bins)
    bin_index = np.arange(model.shape[0]) - first
    B = n_bins[model].astype(np.int64)
    pos_lo = np.minimum(bin_index * n // B, n - 1)
    pos_hi = np.minimum((bin_index + 1) * n // B, n - 1)
    pad = functools.partial(_shapes.pad_axis, size=size)
    return _Layout(
        model=pad(model.astype(np.int32), fill=n_bins.shape[0]),
        bin_index=pad(bin_index.astype(np.int32), fill=0),
        n_bins=pad(B.astype(np.int32), fill=1),
        pos_lo=pad(pos_lo.astype(np.int32), fill=0),
        pos_hi=pad(pos_hi.astype(np.int32), fill=0),
        has_lo=pad(bin_index > 0, fill=False),
        has_hi=pad(bin_index + 1 < B, fill=False),
    )


def _pick(data_range, if_data, if_unit):
    """``if_data`` or ``if_unit``: by Python for a static choice, by ``jnp.where`` for a
    traced one (the pure fit with ``score_scale="auto"``)."""
    if isinstance(data_range, bool):
        return if_data if data_range else if_unit
    return jnp.where(data_range, if_data, if_unit)


def _prior_mean(mid, rate, prior):
    """The bins' prior means :math:`p_b` (module docstring) from their mid scores ``mid``
    and the base rate ``rate``: ``prior`` is ``"probability"``, ``"logit"`` or ``"rank"``,
    or (the pure fit with ``score_scale="auto"``) a traced bool, true for ``"rank"``.
    Clipped into [1e-6, 1 - 1e-6], which keeps the Beta prior proper at 0 / 1."""
    if isinstance(prior, str):
        if prior == "logit":
            p = jax.nn.sigmoid(mid)
        elif prior == "rank":
            p = jnp.broadcast_to(rate, mid.shape)
        else:
            p = mid
    else:
        p = jnp.where(prior, rate, mid)
    return jnp.clip(p, 1e-6, 1.0 - 1e-6).astype(mid.dtype)


def _bins_core(s, t, w, n, layout: _Layout, unit, *, data_range, presorted):
    """Every bin of every model: its weighted count :math:`N_b`, positives :math:`m_b`,
    lower edge and mid score (in the transformed scores :math:`s'`, see ``_posterior``).

    ``s, t, w`` hold ``n`` real points, then padding (copies of the largest score with zero
    weight, so the first ``n`` sorted scores are the real ones); ``layout``: the pairs
    (``_model_layout``). ``unit``: the ends 0 and 1 of the probability scale, transformed;
    ``data_range``: whether the outer bins reach to the training min / max instead (scores
    without a probability scale).
    ``presorted``: the points come sorted by score (on CPU the caller sorts them: NumPy's
    sort takes a tenth of the time of XLA's comparator sort). Returns the sorted scores
    and, per pair, :math:`N_b`, :math:`m_b`, the lower edge (the data minimum or 0 for the
    first bin) and the mid score.
    """
    if presorted:
        ss, tt, ww = s, t, w
    else:
        order = jnp.argsort(s)
        ss, tt, ww = s[order], t[order], w[order]
    # IPS targets may exceed 1; m_b is clipped per bin below
    cw = jnp.concatenate([jnp.zeros(1, w.dtype), cumsum(ww)])
    cm = jnp.concatenate([jnp.zeros(1, w.dtype), cumsum(ww * tt)])
    # points below ss[i]: the first position of its tie run
    new_run = jnp.concatenate([jnp.ones(1, bool), ss[1:] != ss[:-1]])
    run_start = cummax(jnp.where(new_run, jnp.arange(ss.shape[0]), 0))
    lo_all = _pick(data_range, ss[0], unit[0])
    hi_all = _pick(data_range, ss[n - 1], unit[1])
    cut_lo = jnp.where(layout.has_lo, run_start[layout.pos_lo], 0)  # points below each edge
    cut_hi = jnp.where(layout.has_hi, run_start[layout.pos_hi], n)
    N_b = cw[cut_hi] - cw[cut_lo]
    m_b = jnp.clip(cm[cut_hi] - cm[cut_lo], 0.0, N_b)
    lo = jnp.where(layout.has_lo, ss[layout.pos_lo], lo_all)
    mid = 0.5 * (lo + jnp.where(layout.has_hi, ss[layout.pos_hi], hi_all))
    return ss, N_b, m_b, lo, mid


_bins = functools.partial(jit, static_argnames=("data_range", "presorted"))(_bins_core)


def _posterior_core(N_b, m_b, mid, layout: _Layout, m, ess, scaling, rate, *, n_slots, prior):
    r"""Each bin's posterior mean ``theta`` and each model's BDeu log marginal likelihood
    (module docstring) and normalised log weight, over ``n_slots`` model slots (``-inf``
    past the ``m`` models).

    The bin mid scores of the prior are mapped back to scores, :math:`(s'_{mid} + c)\,2^k`
    (``scaling``, ``jaxcal.calibrators._scaling``), and read as ``prior`` says
    (:func:`_prior_mean`; ``rate``: the base rate). Six log-gammas per bin are most of a
    fit's arithmetic: they run in this program, compiled with LLVM's optimisations at every
    size (``jaxcal._jit``), on arguments that are elementwise functions of stored arrays,
    so that their loop vectorises (fused with the gathers of ``_bins`` it would not; 3-4x
    slower).
    """
    mid = _ldexp_traced(mid + scaling.shift.astype(mid.dtype), scaling.exponent)  # a score
    p = _prior_mean(mid, rate, prior)
    a0 = ess / layout.n_bins.astype(mid.dtype)
    alpha, beta = a0 * p, a0 * (1.0 - p)
    theta = (m_b + alpha) / (N_b + a0)
    # one copy of log_gamma's code, looped over its six arguments: a sixth of the compile
    args = jnp.stack([a0, N_b + a0, m_b + alpha, alpha, N_b - m_b + beta, beta])
    lg = jax.lax.map(log_gamma, args)
    term = lg[0] - lg[1] + lg[2] - lg[3] + lg[4] - lg[5]
    real = layout.model < m
    log_ml = jax.ops.segment_sum(
        jnp.where(real, term, 0.0), layout.model, num_segments=n_slots, indices_are_sorted=True
    )
    log_ml = jnp.where(jnp.arange(n_slots) < m, log_ml, -jnp.inf)
    return theta, log_ml, log_ml - jax.nn.logsumexp(log_ml)


_posterior = functools.partial(jit, static_argnames=("n_slots", "prior"), optimize=True)(
    _posterior_core
)


def _ensemble_table_pure(theta, log_weight, layout: _Layout, n: int):
    """:func:`_ensemble_table` in JAX, for the pure fit: the average right of each of the
    ``n`` sorted positions and left of them all, ``(values [n], base)``. Every sorted
    training score is a table edge (the positions without a model edge repeat the value
    before them), so that the table has the fixed size ``n``."""
    weight = jnp.exp(log_weight[layout.model])
    inner = layout.has_lo
    jump = weight * (theta - jnp.concatenate([theta[:1], theta[:-1]]))
    base = jnp.sum(jnp.where(inner, 0.0, weight * theta))
    at = np.where(inner, layout.pos_lo, n)  # outer bins: dropped by the segment sum
    diff = jax.ops.segment_sum(jnp.where(inner, jump, 0.0), at, num_segments=n)
    return base + cumsum(diff), base


def _ensemble_table(
    theta: np.ndarray, log_weight: np.ndarray, layout: _Layout, n_pairs: int, size: int
) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Host-side: the posterior-weighted average of the models as one step map over the
    ``size`` sorted positions, ``(values, is_edge, base)``: the average right of each
    position, whether an edge sits there, and the average left of every edge.

    Model :math:`m` jumps by :math:`\theta_{m,k} - \theta_{m,k-1}` at the lower edge of its
    bin :math:`k \ge 1`, which is the sorted training score at some position. The average at
    a score :math:`s` is :math:`\sum_m w_m \theta_{m,0}` plus the weighted jumps of every
    edge :math:`\le s`: a difference array over the positions (``np.bincount``) and one
    cumulative sum give it right of every position, with a flag for the positions that
    carry an edge. Pairs are model by model, so a pair's predecessor is the same model's
    previous bin. In float64 whatever the working precision.
    """
    theta = theta[:n_pairs].astype(np.float64)
    weight = np.exp(log_weight[layout.model[:n_pairs]].astype(np.float64))
    inner = layout.has_lo[:n_pairs]
    jump = weight * (theta - np.r_[theta[:1], theta[:-1]])
    at = layout.pos_lo[:n_pairs][inner]
    base = float(np.sum(weight[~inner] * theta[~inner]))
    values = base + np.cumsum(np.bincount(at, weights=jump[inner], minlength=size))
    is_edge = np.zeros(size, bool)
    is_edge[at] = True
    return values, is_edge, base


def _compact_table(ss, table, is_edge, base) -> tuple[np.ndarray, np.ndarray]:
    """Host-side: the sorted distinct edges and the average left of the first one and right
    of each (the last of tied edge positions holds the value right of their score)."""
    at = np.flatnonzero(is_edge)
    e = ss[at]
    last = np.r_[e[1:] != e[:-1], True] if at.size else np.zeros(0, bool)
    return e[last], np.r_[base, table[at[last]]]


@pytree_dataclass
class FittedBBQ(FittedCalibrator):
    """Fitted BBQ: an ensemble of equal-frequency histograms with posterior weights.

    Attributes:
        edges: ``[M, B_max - 1]`` inner edges of each model (padded with ``+inf``), like
            every edge here in the transformed score :math:`s' = s\\,2^{-k} - c`
            (``scaling``; the identity unless the working precision could not hold the
            training scores, ``jaxcal.calibrators._scaling``).
        theta: ``[M, B_max]`` posterior-mean probability of each bin (0 on padding).
        log_marginal_likelihood: ``[M]`` BDeu log marginal likelihood of each model.
        log_weight: ``[M]`` normalised log posterior weight of each model.
        n_bins: ``[M]`` bin count of each model.
        table_edges: ``[T]`` the distinct edges of all models, sorted, then ``+inf`` (the
            ``K <= N`` edges padded to the bucket size of the ``N`` training points, see
            ``jaxcal._shapes``, so that ``predict`` compiles once per bucket). After the
            pure fit (inside ``jit``): ``[N]``, all sorted training scores (module
            docstring).
        table_values: ``[T + 1]`` the posterior-weighted average of the models between
            consecutive table edges (``table_values[j]`` right of the first ``j`` edges; the
            last value repeated over the padding): what ``predict`` evaluates, in
            ``O(log T)`` per score.
        score_scale: how the prior read the scores: ``"probability"``, ``"rank"`` or
            ``"logit"`` (``"auto"`` after a pure fit with ``score_scale="auto"``, which
            decides in the program).

    Every float leaf has the dtype of the training scores.

    Example:
        >>> import jaxcal, numpy as np
        >>> p = np.linspace(0.01, 0.99, 300); y = (np.arange(300) % 3 == 0) | (p > 0.7)
        >>> fitted = jaxcal.BBQ().fit(p, y)  # posterior model weights sum to 1:
        >>> round(float(np.exp(np.asarray(fitted.log_weight)).sum()), 3), fitted.score_scale
        (1.0, 'probability')
    """

    edges: jax.Array
    theta: jax.Array
    log_marginal_likelihood: jax.Array
    log_weight: jax.Array
    n_bins: jax.Array
    table_edges: jax.Array
    table_values: jax.Array
    score_scale: str = static_field(default="probability")
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Posterior-weighted average of the models' bin probabilities (one search of the
        ensemble's table per score)."""
        return step_map(self.scaling.apply(scores), self.table_edges, self.table_values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BBQ(Calibrator[FittedBBQ]):
    """Bayesian Binning into Quantiles estimator (Naeini et al. 2015); ``fit`` returns a
    :class:`FittedBBQ`.

    Args:
        c: model range constant :math:`C` (bin counts from :math:`N^{1/3}/C` to
            :math:`C N^{1/3}`).
        equivalent_sample_size: BDeu prior strength :math:`N'`.
        score_scale: ``"auto"`` (``"probability"`` if all training scores lie in [0, 1],
            else ``"rank"``), ``"probability"``, ``"rank"`` or ``"logit"``: where the bins'
            prior means come from (module docstring); ``"rank"`` makes the fit depend on the
            order of the scores alone.

    Raises:
        ValueError: a bad ``c``, ``equivalent_sample_size`` or ``score_scale``, when made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=300)
        >>> y = (rng.uniform(size=300) < 1 / (1 + np.exp(-2 * s))).astype(int)
        >>> cal = jaxcal.BBQ().fit(s, y)  # scores outside [0, 1]: "rank"
        >>> cal.score_scale
        'rank'
        >>> big = jaxcal.BBQ().fit(s * 1e20, y)  # the units do not matter
        >>> bool(np.array_equal(cal.predict(s), big.predict(s * 1e20)))
        True
        >>> jaxcal.BBQ(c=0.5)
        Traceback (most recent call last):
        ...
        ValueError: c must be a finite number and >= 1; got 0.5.
    """

    c: float = 10.0
    equivalent_sample_size: float = 2.0
    score_scale: str = "auto"

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        check_real(self.c, "c", minimum=1.0)
        check_real(self.equivalent_sample_size, "equivalent_sample_size", minimum=0.0, strict=True)
        check_choice(self.score_scale, "score_scale", _SCORE_SCALES)

    def _fit_in(self, d: FitData, dtype: np.dtype) -> FittedBBQ:
        """Score all binning models, store them with their posterior weights (in ``dtype``)."""
        in_unit = bool((d.scores >= 0).all() and (d.scores <= 1).all())
        if self.score_scale == "probability" and not in_unit:
            raise ValueError("score_scale='probability' needs scores in [0, 1].")
        scale = self.score_scale
        if scale == "auto":
            scale = "probability" if in_unit else "rank"
        rate = np.sum(d.weights * d.targets) / np.sum(d.weights)  # the base rate (float64)
        n = d.scores.shape[0]
        n_bins = bbq_bin_counts(n, float(self.c))
        m, b_max, n_pairs = n_bins.shape[0], int(n_bins[-1]), int(n_bins.sum())
        size = _shapes.padded_size(n)
        # bins depend on the order of the scores only; the prior reads the bin mid scores
        # back in score units (_posterior)
        scaling, s = fit_scaling(
            d.scores, d.weights, shift=True, kind=ORDER, what="BBQ", dtype=dtype
        )
        # a tie run is one block: any order within it
        presorted, s, t, w = presort(s, d.targets, d.weights)
        padded = _shapes.pad_rows(size, s, t, w, fills=(s.max(), 0, 0))
        model_slots, pair_slots = _slots(n_bins, size, float(self.c))
        layout = _model_layout(n_bins, n, pair_slots)
        ss, N_b, m_b, lo, mid = _bins(
            *(np.asarray(a, dtype) for a in padded),
            n,
            layout,
            np.asarray(scaling.apply(np.array([0.0, 1.0])), dtype),
            data_range=scale != "probability",
            presorted=presorted,
        )
        ess, rate = (np.asarray(x, dtype) for x in (self.equivalent_sample_size, rate))
        out = _posterior(
            N_b, m_b, mid, layout, m, ess, scaling, rate, n_slots=model_slots, prior=scale
        )
        lo, ss, (theta, log_ml, log_w) = jax.device_get((lo, ss, out))
        table, is_edge, base = _ensemble_table(theta, log_w, layout, n_pairs, n)
        model, bin_index = layout.model[:n_pairs], layout.bin_index[:n_pairs]
        theta_mb = np.zeros((m, b_max), theta.dtype)
        theta_mb[model, bin_index] = theta[:n_pairs]
        edges_mb = np.full((m, b_max - 1), np.inf, lo.dtype)
        inner = bin_index > 0
        edges_mb[model[inner], bin_index[inner] - 1] = lo[:n_pairs][inner]
        table_e, table_v = _compact_table(ss[:n], table, is_edge, base)
        table_v = table_v.astype(dtype)  # the table is summed in float64 (_ensemble_table)
        # padded as the points were (K <= n distinct edges): predict compiles once per bucket
        table_e = _shapes.pad_axis(table_e, size, np.inf)
        table_v = _shapes.pad_axis(table_v, size + 1, table_v[-1])
        fields = (edges_mb, theta_mb, log_ml[:m], log_w[:m], n_bins, table_e, table_v)
        edges_mb, theta_mb, log_ml, log_w, n_bins, table_e, table_v = jax.device_put(fields)
        return FittedBBQ(
            edges=edges_mb,
            theta=theta_mb,
            log_marginal_likelihood=log_ml,
            log_weight=log_w,
            n_bins=n_bins,
            table_edges=table_e,
            table_values=table_v,
            score_scale=scale,
            scaling=scaling,
        )

    def _fit_pure(self, d: PureFitData) -> FittedBBQ:
        """The pure fit: every model of the ``N`` points at once (exact pair layout, no
        padding), the ensemble table over the ``N`` sorted scores, in the scores' dtype."""
        s = d.scores
        n, dtype = s.shape[0], s.dtype
        in_unit = jnp.all((s >= 0) & (s <= 1))
        refused = jnp.zeros((), bool)
        prior = self.score_scale  # "auto": a traced choice, true for "rank"
        if prior == "probability":
            refused = ~in_unit
        elif prior == "auto":
            prior = ~in_unit
        data_range = prior if not isinstance(prior, str) else prior != "probability"
        rate = jnp.sum(d.weights * d.targets) / jnp.sum(d.weights)
        n_bins = bbq_bin_counts(n, float(self.c))
        m, b_max, n_pairs = n_bins.shape[0], int(n_bins[-1]), int(n_bins.sum())
        layout = _model_layout(n_bins, n, n_pairs)
        scaling = pure_identity_scaling(dtype)
        ss, N_b, m_b, lo, mid = _bins_core(
            s,
            d.targets,
            d.weights,
            n,
            layout,
            jnp.array([0.0, 1.0], dtype),
            data_range=data_range,
            presorted=False,
        )
        ess = jnp.asarray(self.equivalent_sample_size, dtype)
        theta, log_ml, log_w = _posterior_core(
            N_b, m_b, mid, layout, m, ess, scaling, rate, n_slots=m, prior=prior
        )
        values, base = _ensemble_table_pure(theta, log_w, layout, n)
        model, bin_index = layout.model, layout.bin_index
        inner = bin_index > 0
        theta_mb = jnp.zeros((m, b_max), dtype).at[model, bin_index].set(theta)
        edges_mb = jnp.full((m, b_max - 1), jnp.inf, dtype)
        edges_mb = edges_mb.at[model[inner], bin_index[inner] - 1].set(lo[inner])
        fitted = FittedBBQ(
            edges=edges_mb,
            theta=theta_mb,
            log_marginal_likelihood=log_ml,
            log_weight=log_w,
            n_bins=jnp.asarray(n_bins),
            table_edges=ss,
            table_values=jnp.concatenate([base[None], values]),
            score_scale=self.score_scale,
            scaling=scaling,
        )
        return poison(fitted, refused)
