r"""Calibrated decisions: how many ranked items to show each user, or none.

For every group (a user, a query) the items are ranked, and :func:`top_k` shows the top
:math:`k` items, with :math:`k` the largest cut-off whose precision is at least ``target``
with probability at least ``credibility`` under the uncertainty of the calibrated
probabilities; where no cut-off qualifies the group *abstains* (:math:`k = 0`, nothing shown).

**Inputs.** The probabilities :math:`p_i = P(y_i = 1)` of the items come in one of three forms:

* ``draws=`` ``[D, n]`` posterior draws of calibrated probabilities, e.g.
  ``Calibrator().fit_bayes(...).probability_draws(scores)`` (:mod:`jaxcal.bayes`): draw
  :math:`d` is one calibration map applied to every item;
* ``interval=(p0, p1)``, a Venn-Abers interval (``jaxcal.VennAbers().fit(...).interval``):
  the lower end :math:`p_0` is used as the conservative probability (one draw);
* ``probs=`` ``[n]`` point probabilities (one draw: no uncertainty about :math:`p`).

Items are ranked within their group by their point probability (the mean of the draws, the
Venn-Abers merged probability :math:`p_1 / (1 - p_0 + p_1)`, or ``probs``), or by
``scores=`` when given; ties keep the input order.

**Guarantees.** For a group with ranked items :math:`1, \dots, m` and
:math:`k = 1, \dots, \min(m, \text{max\_k})`, with :math:`H_k = \sum_{i \le k} y_i` the
number of hits in the top :math:`k`, the credibility of :math:`k` is

* ``guarantee="expected"``: :math:`c_k = \frac1D \sum_d \mathbb 1\bigl[\frac1k
  \sum_{i\le k} p_i^{(d)} \ge t\bigr]`, the posterior probability that the *expected*
  precision at :math:`k` reaches the target :math:`t`;
* ``guarantee="realised"``: :math:`c_k = \frac1D \sum_d P\bigl(H_k \ge k t \mid
  p^{(d)}\bigr)`, the posterior predictive probability that the *realised* precision
  :math:`H_k / k` of the labels reaches :math:`t`, with the labels independent
  :math:`\text{Bernoulli}(p_i^{(d)})` given draw :math:`d`. :math:`H_k` is Poisson-binomial;
  its distribution is computed exactly by the recursion over the ranked items

  .. math::  P(H_k = j) = P(H_{k-1} = j)\,(1 - p_k) + P(H_{k-1} = j - 1)\, p_k,

  in log space (``logaddexp``), so that tail probabilities far below the float range do
  not underflow: :math:`O(m^2)` per group and draw, one ``lax.scan`` over the items,
  ``vmap``-ed over draws and groups.

The chosen cut-off is the *largest* :math:`k \in [\text{min\_k}, \text{max\_k}]` with
:math:`c_k \ge` ``credibility``, so that a group is shown as much as the guarantee allows.
The qualifying cut-offs need not form an interval (a first item of 0.4 followed by one of
0.9 fails at :math:`k = 1` and may pass at :math:`k = 2`): the guarantee is about the whole
list shown. With ``all_prefixes=True`` the chosen :math:`k` is instead the largest for which
every cut-off in :math:`[\text{min\_k}, k]` qualifies, so that a user who stops reading
early is covered too. The comparison :math:`H_k \ge k t` (and :math:`\sum p \ge k t`) allows
a relative rounding slack of four units of the working precision, so that target 0.3 at
:math:`k = 10` needs 3 hits, not 4.

**What it does not guarantee.** The credibility is a statement under the calibration model
(posterior draws, or the Venn-Abers lower end, or the point probabilities taken as true): a
miscalibrated map gives a miscalibrated guarantee, and the labels of a group are taken as
independent given the probabilities. A higher target or credibility never shows more
(tested).

Example:
    >>> import numpy as np, jaxcal
    >>> p = np.array([0.9, 0.8, 0.3, 0.95, 0.2, 0.1])  # two users, three items each
    >>> user = np.array([0, 0, 0, 1, 1, 1])
    >>> d = jaxcal.decide.top_k(user, probs=p, target=0.6, credibility=0.75)
    >>> np.asarray(d.credibility_at_k).round(3)  # P(precision@k >= 0.6): k = 2 needs 2 hits
    array([[0.9  , 0.72 , 0.798],
           [0.95 , 0.19 , 0.267]], dtype=float32)
    >>> d.k  # the largest qualifying k: user 0 gets 3 items although k = 2 fails
    Array([3, 1], dtype=int32)
    >>> d.shown
    Array([ True,  True,  True,  True, False, False], dtype=bool)
    >>> jaxcal.decide.top_k(user, probs=p, target=0.6, credibility=0.75, all_prefixes=True).k
    Array([1, 1], dtype=int32)
    >>> jaxcal.decide.top_k(user, probs=p, target=0.6, credibility=0.9, min_k=3).abstain
    Array([ True,  True], dtype=bool)
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_groups, check_int, check_probs, check_scores

__all__ = ["Decision", "top_k", "poisson_binomial_logpmf", "GUARANTEES"]

#: the guarantees :func:`top_k` offers
GUARANTEES = ("expected", "realised")
_MIN_ITEMS = 8  # smallest bucket of the items axis (the work is quadratic in it)
_CHUNK_ELEMENTS = 1 << 21  # groups per lax.map step: about this many DP entries at once
_SLACK_ULPS = 4  # relative slack of the comparison H_k >= k t, in units of the precision


class Decision(NamedTuple):
    """What :func:`top_k` decided, per group (rows: the sorted distinct group ids) and per
    item (the input order).

    Attributes:
        groups: ``[G]`` the distinct group ids, ascending (row ``g`` of the other fields);
            a NumPy int64 array, so that ids beyond the int32 range survive float32 mode.
        k: ``[G]`` int32 number of items shown (0: the group abstains).
        abstain: ``[G]`` bool, ``k == 0``.
        credibility: ``[G]`` the credibility :math:`c_k` of the chosen ``k``; for a group
            that abstains, the largest :math:`c_k` over the allowed cut-offs (how far it
            was from qualifying; 0 where no cut-off is allowed).
        credibility_at_k: ``[G, K]`` :math:`c_k` for ``k = 1..K`` (``K``: the largest
            group, at most ``max_k``); NaN where ``k`` exceeds the group's size.
        shown: ``[n]`` bool, whether each item is shown.
        rank: ``[n]`` int32 position of each item in its group's ranking (0 = first).

    Example:
        >>> import jaxcal
        >>> d = jaxcal.decide.top_k(
        ...     [1, 1, 2, 2], probs=[0.9, 0.8, 0.3, 0.2], target=0.5, credibility=0.5
        ... )
        >>> d.groups.tolist(), d.k.tolist(), d.abstain.tolist()
        ([1, 2], [2, 0], [False, True])
        >>> # group 1 shows both (a hit among 2 with prob 1 - 0.1 * 0.2); group 2 abstains
        >>> d.credibility.tolist(), d.shown.tolist()
        ([0.98, 0.44], [True, True, False, False])
    """

    groups: np.ndarray
    k: jax.Array
    abstain: jax.Array
    credibility: jax.Array
    credibility_at_k: jax.Array
    shown: jax.Array
    rank: jax.Array


# ------------------------------------------------------------------------------ the core
def _log_bernoulli_step(logpmf: jax.Array, p: jax.Array) -> jax.Array:
    """``log P(H + y = j)`` from ``logpmf[..., j] = log P(H = j)`` and ``y ~ Bernoulli(p)``
    (``p[...]``); the last entry of ``logpmf`` must be ``-inf`` (no room is lost)."""
    log_p, log_q = jnp.log(p)[..., None], jnp.log1p(-p)[..., None]
    minus_inf = jnp.full(logpmf.shape[:-1] + (1,), -jnp.inf, logpmf.dtype)
    shifted = jnp.concatenate([minus_inf, logpmf[..., :-1]], axis=-1)
    return jnp.logaddexp(logpmf + log_q, shifted + log_p)


def _point_mass_at_zero(shape: tuple[int, ...], m: int, dtype) -> jax.Array:
    """``[..., m + 1]`` log pmf of ``H = 0``."""
    return jnp.broadcast_to(jnp.where(jnp.arange(m + 1) == 0, 0.0, -jnp.inf).astype(dtype),
                            shape + (m + 1,))  # fmt: skip


@jit
def _logpmf_core(p: jax.Array) -> jax.Array:
    """``[B, m] -> [B, m + 1]`` Poisson-binomial log pmf of each row."""
    init = _point_mass_at_zero(p.shape[:1], p.shape[1], p.dtype)
    out, _ = jax.lax.scan(lambda c, x: (_log_bernoulli_step(c, x), None), init, p.T)
    return out


def _needed_hits(k: jax.Array, target: jax.Array) -> jax.Array:
    """``k t`` less a relative slack of a few units of the working precision."""
    slack = _SLACK_ULPS * jnp.finfo(k.dtype).eps
    return k * target * (1 - slack)


def _credibility_curve(p, draw_mask, target, guarantee):
    """``[L]`` credibility of every cut-off of one group: ``p`` ``[D, L]`` probabilities
    in rank order (padded items: 0), ``draw_mask`` ``[D]`` 1 for real draws."""
    n_items = p.shape[-1]
    k = jnp.arange(1, n_items + 1, dtype=p.dtype)
    need = _needed_hits(k, target)
    n_draws = jnp.sum(draw_mask)
    if guarantee == "expected":
        reached = (jnp.cumsum(p, axis=-1) >= need).astype(p.dtype)  # [D, L]
        return draw_mask @ reached / n_draws
    hits = jnp.arange(n_items + 1, dtype=p.dtype)

    def step(logpmf, x):
        p_i, need_i = x
        logpmf = _log_bernoulli_step(logpmf, p_i)
        tail = jax.nn.logsumexp(jnp.where(hits >= need_i, logpmf, -jnp.inf), axis=-1)
        return logpmf, tail

    init = _point_mass_at_zero(p.shape[:1], n_items, p.dtype)
    _, log_tail = jax.lax.scan(step, init, (p.T, need))  # [L, D]
    return jnp.exp(log_tail) @ draw_mask / n_draws


def _choose(curve, size, credibility, min_k, max_k, all_prefixes):
    """The largest qualifying cut-off of one group and its credibility (see top_k)."""
    k = jnp.arange(1, curve.shape[-1] + 1)
    allowed = (k >= min_k) & (k <= max_k) & (k <= size)
    passes = curve >= credibility
    failed_before = jnp.cumsum(allowed & ~passes) > 0
    qualifies = allowed & passes & ~(all_prefixes & failed_before)
    chosen = jnp.max(jnp.where(qualifies, k, 0))
    best = jnp.max(jnp.where(allowed, curve, 0.0))
    achieved = jnp.where(chosen > 0, curve[jnp.maximum(chosen - 1, 0)], best)
    return chosen.astype(jnp.int32), achieved


@functools.partial(jit, static_argnames=("guarantee",))
def _decide(p, draw_mask, sizes, target, credibility, min_k, max_k, all_prefixes, *, guarantee):
    """``p`` ``[G, D, L]`` ranked probabilities of every group -> (k ``[G]``, credibility
    ``[G]``, curve ``[G, L]``); groups are mapped in chunks of bounded memory."""
    target = jnp.asarray(target, p.dtype)
    credibility = jnp.asarray(credibility, p.dtype)

    def one(args):
        pg, size = args
        curve = _credibility_curve(pg, draw_mask, target, guarantee)
        k, achieved = _choose(curve, size, credibility, min_k, max_k, all_prefixes)
        return k, achieved, curve

    per_step = max(1, _CHUNK_ELEMENTS // (p.shape[1] * (p.shape[2] + 1)))
    return jax.lax.map(one, (p, sizes), batch_size=min(per_step, p.shape[0]))


# ------------------------------------------------------------------------------ the shell
def poisson_binomial_logpmf(probs: ArrayLike) -> jax.Array:
    r"""Log pmf of the number of successes of independent Bernoulli trials.

    :math:`\log P(H = j)` for :math:`H = \sum_{i=1}^m y_i`, :math:`y_i \sim
    \text{Bernoulli}(p_i)` independent, :math:`j = 0..m`, by the exact recursion over the
    trials in log space (module docstring), :math:`O(m^2)`.

    Args:
        probs: ``[m]`` or ``[B, m]`` success probabilities in [0, 1] (rows: independent
            problems).

    Returns:
        ``[m + 1]`` (or ``[B, m + 1]``) log probabilities; ``-inf`` where
        :math:`P(H = j) = 0`.

    Raises:
        ValueError: ``probs`` not 1-D or 2-D, empty, not finite, or outside [0, 1].

    Example:
        >>> import numpy as np, jaxcal
        >>> np.exp(jaxcal.decide.poisson_binomial_logpmf([0.5, 0.5]))
        array([0.25, 0.5 , 0.25], dtype=float32)
    """
    p = _check_prob_matrix(probs, "probs", allow_1d=True)
    squeeze = p.ndim == 1
    p = p.reshape(1, -1) if squeeze else p
    b, m = p.shape
    size = _shapes.padded_size(m, total=b * m, minimum=_MIN_ITEMS)
    rows = _shapes.padded_size(b, total=b * size, minimum=1)
    padded = np.zeros((rows, size), jnp.result_type(float))  # p = 0 adds no success
    padded[:b, :m] = p
    out = np.asarray(_logpmf_core(padded))[:b, : m + 1]
    return jax.device_put(out[0] if squeeze else out)


def top_k(
    group: ArrayLike,
    *,
    probs: ArrayLike | None = None,
    draws: ArrayLike | None = None,
    interval: tuple[ArrayLike, ArrayLike] | None = None,
    scores: ArrayLike | None = None,
    target: float,
    credibility: float = 0.9,
    guarantee: str = "realised",
    max_k: int | None = None,
    min_k: int = 1,
    all_prefixes: bool = False,
) -> Decision:
    r"""Per group, the largest top-:math:`k` list whose precision reaches ``target`` with
    credibility ``credibility``, or abstention (the rule is in the module docstring).

    Give exactly one of ``probs``, ``draws`` and ``interval``.

    Args:
        group: ``[n]`` integer group id of each item (user, query).
        probs: ``[n]`` point probabilities in [0, 1] (taken as exact).
        draws: ``[D, n]`` posterior draws of the probabilities, in [0, 1] (e.g.
            ``posterior.probability_draws(scores)``).
        interval: ``(p0, p1)``, ``[n]`` each: a Venn-Abers interval, ``p0 <= p1``; the
            rule uses ``p0``.
        scores: optional ``[n]`` scores that rank the items within their group (higher
            first); default: the point probability.
        target: the precision to reach, in (0, 1].
        credibility: the probability with which it must be reached, in (0, 1).
        guarantee: ``"realised"`` (the precision of the labels) or ``"expected"`` (the
            mean probability of the items shown).
        max_k: the most items shown per group (default: all).
        min_k: the fewest items a non-empty list may have (>= 1; default 1).
        all_prefixes: choose the largest ``k`` such that every cut-off in ``[min_k, k]``
            qualifies (default: the largest qualifying ``k``).

    Returns:
        A :class:`Decision`.

    Raises:
        ValueError: not exactly one of ``probs`` / ``draws`` / ``interval``; shapes that
            disagree; values outside [0, 1] or not finite; ``p0 > p1``; ``target`` outside
            (0, 1]; ``credibility`` outside (0, 1); an unknown ``guarantee``; ``min_k`` or
            ``max_k`` not integers >= 1, or ``max_k < min_k``.

    Example:
        >>> import numpy as np, jaxcal
        >>> draws = np.array([[0.9, 0.6], [0.7, 0.4], [0.8, 0.5]])  # 3 draws, 2 items
        >>> d = jaxcal.decide.top_k([7, 7], draws=draws, target=0.6, credibility=0.6,
        ...                         guarantee="expected")
        >>> d.k, d.credibility  # mean of the top 2 >= 0.6 in 2 draws of 3
        (Array([2], dtype=int32), Array([0.666...], dtype=float32))
    """
    values, point = _check_sources(probs, draws, interval)
    n_draws, n = values.shape
    n_ids = np.shape(group)[0] if np.ndim(group) == 1 else None
    if n_ids is not None and n_ids != n:
        raise ValueError(f"length mismatch: {n} items but {n_ids} group ids.")
    g = check_groups(group, n)
    if scores is not None:
        point = check_scores(scores)
        if point.shape[0] != n:
            raise ValueError(f"length mismatch: {n} items but {point.shape[0]} scores.")
    if guarantee not in GUARANTEES:
        raise ValueError(f"guarantee must be one of {GUARANTEES}; got {guarantee!r}.")
    target, credibility = _check_levels(target, credibility)
    min_k = check_int(min_k, "min_k")
    max_k = None if max_k is None else check_int(max_k, "max_k")
    if max_k is not None and max_k < min_k:
        raise ValueError(f"max_k ({max_k}) must be >= min_k ({min_k}).")

    ids, code = np.unique(g, return_inverse=True)
    n_groups = ids.shape[0]
    order = np.lexsort((-point, code))  # by group, then best first; stable for ties
    sizes = np.bincount(code, minlength=n_groups)
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - starts[code[order]]
    width = int(sizes.max()) if max_k is None else min(int(sizes.max()), max_k)

    total = n_groups * n_draws * width
    gp = _shapes.padded_size(n_groups, total=total, minimum=1)
    dp = _shapes.padded_size(n_draws, total=total, minimum=1)
    lp = _shapes.padded_size(width, total=total, minimum=_MIN_ITEMS)
    dtype = jnp.result_type(float)
    ranked = np.zeros((gp, dp, lp), dtype)
    keep = rank < width
    ranked[code[keep], :n_draws, rank[keep]] = values[:, keep].T
    draw_mask = np.zeros(dp, dtype)
    draw_mask[:n_draws] = 1.0
    padded_sizes = np.zeros(gp, np.int32)
    padded_sizes[:n_groups] = sizes
    k, achieved, curve = _decide(
        ranked, draw_mask, padded_sizes, target, credibility, np.int32(min_k),
        np.int32(lp if max_k is None else max_k), np.bool_(all_prefixes), guarantee=guarantee,
    )  # fmt: skip
    k = np.asarray(k)[:n_groups]
    curve = np.array(curve)[:n_groups, :width]
    curve[np.arange(width)[None, :] >= sizes[:, None]] = np.nan
    shown = rank < k[code]
    return Decision(
        groups=ids,
        k=jax.device_put(k),
        abstain=jax.device_put(k == 0),
        credibility=jax.device_put(np.asarray(achieved)[:n_groups]),
        credibility_at_k=jax.device_put(curve),
        shown=jax.device_put(shown),
        rank=jax.device_put(rank.astype(np.int32)),
    )


# ------------------------------------------------------------------------------ checks
def _check_prob_matrix(x: Any, name: str, *, allow_1d: bool = False) -> np.ndarray:
    """A finite, non-empty ``[D, n]`` (or ``[n]`` when ``allow_1d``) array in [0, 1]."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric; got dtype {arr.dtype}.")
    ranks = (1, 2) if allow_1d else (2,)
    if arr.ndim not in ranks or arr.size == 0:
        want = "[n] or [B, n]" if allow_1d else "[n_draws, n_items]"
        raise ValueError(f"{name} must be a non-empty {want} array; got shape {arr.shape}.")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contain non-finite values (NaN or inf); remove them first.")
    if (arr < 0).any() or (arr > 1).any():
        raise ValueError(
            f"{name} must lie in [0, 1]; got min {arr.min():.6g}, max {arr.max():.6g}. "
            "Pass probabilities, not scores or logits."
        )
    return arr


def _check_sources(probs, draws, interval) -> tuple[np.ndarray, np.ndarray]:
    """``([D, n] probabilities the rule uses, [n] point probabilities that rank)``."""
    given = [name for name, v in (("probs", probs), ("draws", draws), ("interval", interval))
             if v is not None]  # fmt: skip
    if len(given) != 1:
        raise ValueError(
            f"give exactly one of probs=, draws= and interval=; got {given or 'none'}."
        )
    if probs is not None:
        p = check_probs(probs)
        return p[None, :], p
    if draws is not None:
        d = _check_prob_matrix(draws, "draws")
        return d, d.mean(axis=0)
    if not isinstance(interval, tuple | list) or len(interval) != 2:
        raise ValueError("interval must be a pair (p0, p1) of [n] arrays (VennAbers.interval).")
    p0, p1 = (check_probs(v, name=name) for v, name in zip(interval, ("p0", "p1"), strict=True))
    if p0.shape != p1.shape:
        raise ValueError(f"shape mismatch: p0 {p0.shape} but p1 {p1.shape}.")
    # a Venn-Abers interval computed in float32 may cross by a rounding error
    bad = p0 > p1 + 1e-6
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"interval needs p0 <= p1; got p0 > p1 at {int(bad.sum())} item(s), first at "
            f"index {i} ({p0[i]:.6g} > {p1[i]:.6g}). Pass (lower, upper)."
        )
    p0 = np.minimum(p0, p1)
    return p0[None, :], p1 / (1.0 - p0 + p1)


def _check_levels(target: Any, credibility: Any) -> tuple[float, float]:
    values = {}
    for name, v in (("target", target), ("credibility", credibility)):
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise ValueError(f"{name} must be a number; got {v!r}.")
        values[name] = float(v)
    if not 0.0 < values["target"] <= 1.0:
        raise ValueError(f"target must be in (0, 1]; got {target!r}.")
    if not 0.0 < values["credibility"] < 1.0:
        raise ValueError(f"credibility must be in (0, 1); got {credibility!r}.")
    return values["target"], values["credibility"]
