r"""Intervals for a segment's calibration gap (pure core of ``segment_report``).

The gap of a segment :math:`S` is its observed minus its predicted rate,
:math:`\hat g = \sum_S w_i (y_i - p_i) / W_S`. Its interval inverts the score test of a
logit offset :math:`\delta` in the model :math:`\pi_i(\delta) = \sigma(\operatorname{logit}
p_i + \delta)` for the rows of the segment (the correction a multicalibration method
applies there):

.. math::

    \Bigl\{\delta : \Bigl|\textstyle\sum_S w_i (y_i - \pi_i(\delta))\Bigr|
        \le z \sqrt{\textstyle\sum_S w_i^2 \pi_i(\delta)(1 - \pi_i(\delta))}\Bigr\},

mapped to the gap scale by :math:`g(\delta) = \sum_S w_i (\pi_i(\delta) - p_i) / W_S`
(increasing in :math:`\delta`, with :math:`g(\hat\delta) = \hat g` at the estimate). With one
probability and unit weights this is Wilson's score interval for a proportion, shifted by
the prediction; like it, it stays inside :math:`[-\bar p, 1 - \bar p]` and keeps near
nominal coverage for small or extreme segments, where a Wald interval does not. The
variance uses :math:`w_i^2`, so IPS weights are treated as in the ECCE's :math:`\sigma`.

The bounds are found by bisection on :math:`\delta \in [-40, 40]` (64 halvings); a segment
with no positives (negatives) gets the lower (upper) end of the range. A segment whose
probabilities are all 0 or 1 (no variance) or that has no weight gets NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["gap_intervals"]

_BOUND = 40.0
_HALVINGS = 64


def gap_intervals(p, y, w, masks, z):
    """``(lower, upper)``, ``[S]`` bounds of the gap of each ``[S, n]`` segment mask at the
    normal quantile ``z`` (e.g. 1.96 for 95%)."""
    logit = jnp.log(p) - jnp.log1p(-p)  # +-inf at 0 and 1: those rows never move

    def one(mask):
        wm = w * mask
        weight = jnp.sum(wm)

        def stat(delta):
            pi = jax.nn.sigmoid(logit + delta)
            score = jnp.sum(wm * (y - pi))
            return score / jnp.sqrt(jnp.sum(wm * w * pi * (1.0 - pi)))

        def bound(target):
            # t(delta) decreases: keep lo where t > target
            def body(_, bracket):
                lo, hi = bracket
                mid = 0.5 * (lo + hi)
                above = stat(mid) > target
                return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

            start = (jnp.asarray(-_BOUND, p.dtype), jnp.asarray(_BOUND, p.dtype))
            lo, hi = lax.fori_loop(0, _HALVINGS, body, start)
            return 0.5 * (lo + hi)

        def gap(delta):
            return jnp.sum(wm * (jax.nn.sigmoid(logit + delta) - p)) / weight

        variance = jnp.sum(wm * w * p * (1.0 - p))
        ok = (weight > 0) & (variance > 0)
        lower, upper = gap(bound(z)), gap(bound(-z))
        return jnp.where(ok, lower, jnp.nan), jnp.where(ok, upper, jnp.nan)

    return jax.vmap(one)(jnp.asarray(masks).astype(p.dtype))
