"""ENIR's exact algorithm in JAX (:mod:`jaxcal.calibrators.enir` describes it): the
near-isotonic path by modified PAV with a tournament tree (:func:`trace_path`), and the
BIC-weighted average of its breakpoint models from the path's segments
(:func:`average_path`). This is what GPU / TPU programs run, and CPU programs with
``JAXCAL_NATIVE=0``; CPU programs otherwise call the same algorithm compiled in
``jaxcal/_native/enir_cpu.cc``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxcal._scan import cummax, cumsum, searchsorted
from jaxcal._vma import varying_like

__all__ = [
    "trace_path",
    "average_path",
    "path_values",
    "near_isotonic_values",
    "enir_average_differentiable",
]


_FANOUT = 32  # children per node of the tournament tree over pair collision times
_LOG_W_MARGIN = 40.0  # dropped models carry < e^-40 of the best model's weight, together


def _least_log_loss(s1, s0, a, b, eps):
    """min of -(s1 log p + s0 log(1 - p)), p = clip(beta, eps, 1 - eps), over beta between
    ``a`` and ``b``: the loss is convex in p, so p is the best rate s1 / (s1 + s0) clamped
    into the (clipped) interval."""
    lo = jnp.clip(jnp.minimum(a, b), eps, 1.0 - eps)
    hi = jnp.clip(jnp.maximum(a, b), eps, 1.0 - eps)
    p = jnp.clip(s1 / jnp.where(s1 + s0 > 0, s1 + s0, 1.0), lo, hi)
    return -(s1 * jnp.log(p) + s0 * jnp.log1p(-p))


def _at(v0, lam0, slope, lam):
    """Value at ``lam`` of a group that was ``v0`` at ``lam0`` and moves with ``slope``."""
    return v0 + jnp.where(slope == 0, 0.0, slope * (lam - lam0))


def _collision(va, vb, sa, sb, lam, tol):
    """Absolute lambda at which adjacent groups a < b (values ``va, vb`` at ``lam``, slopes
    ``sa, sb``) meet: ``lam`` if already equal (within ``tol``), ``inf`` if they never do."""
    num, den = va - vb, sb - sa
    t = num / jnp.where(den != 0, den, 1.0)
    return jnp.where(jnp.abs(num) <= tol, lam, jnp.where((den != 0) & (t > 0), lam + t, jnp.inf))


def _tolerance(y):
    return 64 * jnp.finfo(y.dtype).eps * (1.0 + jnp.max(jnp.abs(y)))


def _start(w, y, real, tol):
    """Slopes of the single-run groups at ``lambda = 0``, the runs' collision lambdas, and
    which runs have a next (real) run."""
    n = y.shape[0]
    idx = jnp.arange(n)
    has_next = idx < jnp.sum(real) - 1
    y_next = jnp.concatenate([y[1:], y[-1:]])
    y_prev = jnp.concatenate([y[:1], y[:-1]])
    up = (idx > 0) & real & (y_prev > y + tol)
    down = has_next & (y > y_next + tol)
    slope = (up.astype(y.dtype) - down.astype(y.dtype)) / jnp.where(real, w, 1.0)
    slope = jnp.where(real, slope, 0.0)
    slope_next = jnp.concatenate([slope[1:], slope[-1:]])
    leaves = jnp.where(has_next, _collision(y, y_next, slope, slope_next, 0.0, tol), jnp.inf)
    return slope, leaves, has_next


def _tree_build(leaves):
    """Tournament tree: a list of levels ``(t, i)``, the minimum time and its leaf under each
    node; level 0 holds the leaves, every level but the root (one node) has a length that is
    a multiple of ``_FANOUT``."""
    pad = lambda a, fill: jnp.concatenate(  # noqa: E731
        [a, jnp.full(-a.shape[0] % _FANOUT, fill, a.dtype)]
    )
    t, i = pad(leaves, jnp.inf), pad(jnp.arange(leaves.shape[0], dtype=jnp.int32), 0)
    levels = [(t, i)]
    while t.shape[0] > 1:
        tt, ii = t.reshape(-1, _FANOUT), i.reshape(-1, _FANOUT)
        a = jnp.argmin(tt, axis=1)[:, None]
        t = jnp.take_along_axis(tt, a, 1)[:, 0]
        i = jnp.take_along_axis(ii, a, 1)[:, 0]
        if t.shape[0] > 1:
            t, i = pad(t, jnp.inf), pad(i, 0)
        levels.append((t, i))
    return levels


def _tree_set(levels, idx, t_new):
    """Set leaves ``idx`` to ``t_new`` and repair their ancestors, level by level (so that
    paths which meet recompute the shared node from already-repaired children)."""
    t0, i0 = levels[0]
    out = [(t0.at[idx].set(t_new), i0)]
    lane = jnp.arange(_FANOUT)
    node = idx
    for t, i in levels[1:]:
        node = node // _FANOUT
        kids = node[:, None] * _FANOUT + lane
        ct, ci = out[-1]
        rows = ct[kids]
        a = jnp.argmin(rows, axis=1)
        best = jnp.take_along_axis(rows, a[:, None], 1)[:, 0]
        leaf = jnp.take_along_axis(ci[kids], a[:, None], 1)[:, 0]
        out.append((t.at[node].set(best), i.at[node].set(leaf)))
    return out


class _Path(NamedTuple):
    """Pass 1: the path. Groups are keyed by their first run; ``group`` rows hold
    ``(W, S1, S0, v0, lam0, slope)``, ``links`` rows ``(previous, next)`` group start
    (``-1`` / ``N`` at the ends); leaf ``g`` of ``tree`` is the collision lambda of group
    ``g`` with the next group."""

    lam: jax.Array
    slope0: jax.Array  # [N] the single runs' slopes at lambda = 0
    group: jax.Array  # [N, 6]
    links: jax.Array  # [N, 2] int32, up to date but for ``relink``
    relink: jax.Array  # (g, next): the last merge's link update, applied at the next one
    tree: list
    n_groups: jax.Array
    n_events: jax.Array
    event_int: jax.Array  # [N, 3] int32: (left group, absorbed right group, the group
    # after them or N) of each merge
    event_float: jax.Array  # [N, 5]: (lambda, merged value, merged slope, S1, S0)
    bp_lam: jax.Array  # [N] lambda of the breakpoint model recorded before event e (nan: none)
    n_models: jax.Array


def trace_path(w, y, s1, s0, real, lam_stop):
    """Trace the near-isotonic path (modified PAV) up to ``lam_stop`` or the isotonic fit.

    ``w, y, s1, s0`` are run weights, run mean targets and positive / negative weights
    (``[N]``; padding runs have ``real == False`` and are never linked in). One event (one
    merge of two adjacent groups) per loop iteration, at ``O(log N)`` cost: the next event
    is the root of a tournament tree over the pairs' collision lambdas, and a merge changes
    the slope of the merged group only (the neighbours' slopes depend on which side of the
    merged group they are, which a merge at equal values does not change), so three leaves
    are updated. Every merge is logged (``event_*``), and so is every breakpoint model (a
    lambda at which the configuration changes, ``lambda = 0`` excluded; merges closer than
    a relative 1e-12 in lambda count as simultaneous) as ``bp_lam[e]``: the model after
    merges ``0 .. e-1``.
    """
    n = w.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    tol = _tolerance(y)
    slope, leaves, has_next = _start(w, y, real, tol)
    group = jnp.stack([w, s1, s0, y, jnp.zeros_like(y), slope], axis=1)
    links = jnp.stack([idx - 1, jnp.where(has_next, idx + 1, n)], axis=1).astype(jnp.int32)
    rel = 1e-12

    def cond(st: _Path):
        return st.tree[-1][0][0] < lam_stop

    def body(st: _Path) -> _Path:
        t_next = st.tree[-1][0][0]
        g = st.tree[-1][1][0]
        links = _relink(st.links, st.relink)
        p, h = links[g, 0], links[g, 1]
        nn = links[h, 1]
        has_p, has_n = p >= 0, nn < n
        new_bp = t_next > st.lam * (1.0 + rel)
        record = new_bp & (st.lam > 0)
        lam = jnp.where(new_bp, t_next, st.lam)
        rows = st.group[jnp.stack([jnp.maximum(p, 0), g, h, jnp.minimum(nn, n - 1)])]
        vp, vg, vh, vn = (_at(r[3], r[4], r[5], lam) for r in rows)
        wg, wh = rows[1, 0], rows[2, 0]
        W = wg + wh
        S1, S0 = rows[1, 1] + rows[2, 1], rows[1, 2] + rows[2, 2]
        v = (wg * vg + wh * vh) / W
        up = has_p & (vp > v + tol)
        down = has_n & (v > vn + tol)
        sl = (up.astype(v.dtype) - down.astype(v.dtype)) / W
        t_p = jnp.where(has_p, _collision(vp, v, rows[0, 5], sl, lam, tol), jnp.inf)
        t_g = jnp.where(has_n, _collision(v, vn, sl, rows[3, 5], lam, tol), jnp.inf)
        group = st.group.at[g].set(jnp.stack([W, S1, S0, v, lam, sl]))
        tree = _tree_set(
            st.tree,
            jnp.stack([jnp.where(has_p, p, h), g, h]),
            jnp.stack([jnp.where(has_p, t_p, jnp.inf), t_g, jnp.asarray(jnp.inf, v.dtype)]),
        )
        e = st.n_events
        return _Path(
            lam=lam,
            slope0=st.slope0,
            group=group,
            links=links,
            relink=jnp.stack([g, nn]),
            tree=tree,
            n_groups=st.n_groups - 1,
            n_events=e + 1,
            event_int=st.event_int.at[e].set(jnp.stack([g, h, nn])),
            event_float=st.event_float.at[e].set(jnp.stack([lam, v, sl, S1, S0])),
            bp_lam=st.bp_lam.at[e].set(jnp.where(record, st.lam, jnp.nan)),
            n_models=st.n_models + record,
        )

    init = _Path(
        lam=jnp.zeros((), y.dtype),
        slope0=slope,
        group=group,
        links=links,
        relink=jnp.array([n, n], jnp.int32),
        tree=_tree_build(leaves),
        n_groups=jnp.sum(real).astype(jnp.int32),
        n_events=jnp.zeros((), jnp.int32),
        event_int=jnp.zeros((n, 3), jnp.int32),
        event_float=jnp.zeros((n, 5), y.dtype),
        bp_lam=jnp.full(n, jnp.nan, y.dtype),
        n_models=jnp.zeros((), jnp.int32),
    )
    init = varying_like(init, y, real)  # inside shard_map: the carry varies as the data
    path = lax.while_loop(cond, body, init)
    return path._replace(links=_relink(path.links, path.relink))


def _relink(links, relink):
    """Apply a merge's link update: ``g`` now precedes ``next`` (if ``next < N``).

    Deferred to the start of the following merge so that every read of ``links`` follows
    the in-place update (reads scheduled after it would make XLA copy the whole array)."""
    g, nxt = relink[0], relink[1]
    n = links.shape[0]
    return links.at[jnp.stack([g, jnp.where(nxt < n, nxt, n)]), jnp.array([1, 0])].set(
        jnp.stack([nxt, g]), mode="drop"
    )


def _run_values(alive, v0, lam0, slope, lam):
    """Fitted value of every run at ``lam`` from the per-group state (``O(N)``)."""
    gid = cummax(jnp.where(alive, jnp.arange(alive.shape[0]), 0))
    return _at(v0[gid], lam0[gid], slope[gid], lam)


def _group_starts(path: _Path, real):
    """Whether each run starts a group of the path's last configuration: iff the group
    before it links to it (absorbed runs keep stale links that no live group points back
    along)."""
    prev = path.links[:, 0]
    n = prev.shape[0]
    return real & ((prev < 0) | (path.links[jnp.maximum(prev, 0), 1] == jnp.arange(n)))


def path_values(path: _Path, real, lam):
    """Fitted value of every run at ``lam`` (not before the path's last merge)."""
    alive = _group_starts(path, real)
    return _run_values(alive, path.group[:, 3], path.group[:, 4], path.group[:, 5], lam)


def near_isotonic_values(w, y, real, lam):
    r"""The near-isotonic fit of the runs at ``lam`` (``inf``: the isotonic fit), as
    :func:`trace_path` + :func:`path_values`, differentiable in ``w``, ``y`` and ``lam``.

    The path runs on the values alone (never differentiated). At ``lam`` a fused group
    :math:`A` has the value :math:`\beta_A = (\sum_{r \in A} W_r y_r + \lambda c_A) / W_A`,
    :math:`c_A \in \{-1, 0, 1\}` its violating neighbours (above on the left minus below on
    the right); the groups and :math:`c_A` are piecewise constant in the data, so the
    derivative is this expression's with them held fixed (exact unless a merge happens at
    exactly ``lam``), added to the path's own values as a zero that carries the tangent.

    ``w``, ``y``, ``real``: ``[N]`` run weights (positive for the real runs), values, and
    whether a run is real (real runs first); ``lam``: a scalar. Returns ``[N]`` values.
    """
    wc, yc, lc = (lax.stop_gradient(a) for a in (w, y, lam))
    zero = jnp.zeros_like(yc)
    path = trace_path(wc, yc, zero, zero, real, lc)
    at = jnp.where(jnp.isinf(lc), path.lam, lc)
    values = path_values(path, real, at)
    n = y.shape[0]
    gid = cummax(jnp.where(_group_starts(path, real), jnp.arange(n), 0))
    c = jnp.round(path.group[:, 0] * path.group[:, 5])  # W_A * slope_A = c_A
    wr = jnp.where(real, w, 0.0)
    sw = jax.ops.segment_sum(wr, gid, num_segments=n)
    swy = jax.ops.segment_sum(wr * y, gid, num_segments=n)
    lam_t = jnp.where(jnp.isinf(lc), at, lam)  # no tangent at the isotonic end
    beta = (swy[gid] + lam_t * c[gid]) / jnp.where(real, sw[gid], 1.0)
    return values + jnp.where(real, beta - lax.stop_gradient(beta), 0.0)


def _log_weight(values, s1, s0, real, n_groups, log_n, eps):
    """``-BIC / 2`` of a model: Bernoulli log-likelihood (fit clipped) - K log(N) / 2."""
    pc = jnp.clip(values, eps, 1.0 - eps)
    ll = jnp.sum(jnp.where(real, s1 * jnp.log(pc) + s0 * jnp.log1p(-pc), 0.0))
    return ll - 0.5 * n_groups * log_n


def _segments(path: _Path, y, s1, s0, real):
    """Every group *segment* of the path, as ``[2N]`` arrays: the single runs at
    ``lambda = 0`` (first half) and the group made by each merge (second half).

    A segment exists for the breakpoint models ``first .. last`` (model ``k`` is the one
    logged before merge ``k``; ``k = E``, after the last merge, is the final isotonic model),
    covers the runs ``run_lo .. run_hi``, has the value ``v0 + slope (lambda - lam0)`` and the
    positive / negative weight sums ``S1, S0``. The end of each segment is the next merge of
    the same group key, found by one sort of the ``2E`` (key, merge) pairs.
    """
    n = y.shape[0]
    n_ev = path.n_events
    ev = jnp.arange(n, dtype=jnp.int32)
    valid = ev < n_ev
    g, h, nxt_group = (path.event_int[:, j] for j in range(3))
    lam, v, sl, S1, S0 = (path.event_float[:, j] for j in range(5))
    key = jnp.concatenate([jnp.where(valid, g, n), jnp.where(valid, h, n)])
    when = jnp.concatenate([ev, ev])
    starts = jnp.concatenate([valid, jnp.zeros(n, bool)])  # g starts a segment, h does not
    key, when, starts = lax.sort((key, when, starts), num_keys=2)
    same_next = jnp.concatenate([key[1:] == key[:-1], jnp.zeros(1, bool)])
    nxt = jnp.where(same_next, jnp.concatenate([when[1:], when[-1:]]), n_ev)
    end_merge = jnp.full(n, n_ev, jnp.int32).at[jnp.where(starts, when, n)].set(nxt, mode="drop")
    first_merge = jax.ops.segment_min(when, key, num_segments=n + 1)[:n]
    n_real = jnp.sum(real).astype(jnp.int32)
    return dict(
        valid=jnp.concatenate([real, valid]),
        first=jnp.concatenate([jnp.zeros(n, jnp.int32), ev + 1]),
        last=jnp.concatenate([jnp.minimum(first_merge, n_ev), end_merge]),
        run_lo=jnp.concatenate([ev, g]),
        run_hi=jnp.concatenate([ev, jnp.minimum(nxt_group, n_real) - 1]),
        v0=jnp.concatenate([y, v]),
        lam0=jnp.concatenate([jnp.zeros_like(y), lam]),
        slope=jnp.concatenate([path.slope0, sl]),
        S1=jnp.concatenate([s1, S1]),
        S0=jnp.concatenate([s0, S0]),
    )


def _breakpoint_bounds(path: _Path, y, s1, s0, real, log_n, eps, seg=None):
    """Lower bound on the BIC of the breakpoint model logged before each merge (``[N]``).

    Over its span of breakpoints a segment's value moves linearly between two known ends,
    so its log-loss at any breakpoint in the span is at least the least log-loss over that
    interval (``_least_log_loss``). Summing the segments alive at each breakpoint (a
    difference array) and adding ``K log N`` bounds the BIC: ``O(R log R)`` in all.
    ``seg``: the path's ``_segments``, if the caller has them already.
    """
    n = y.shape[0]
    seg = _segments(path, y, s1, s0, real) if seg is None else seg
    lam_at = jnp.concatenate([path.event_float[:, 0], jnp.zeros(1, y.dtype)])
    lam_at = lam_at.at[path.n_events].set(path.lam)
    v_end = _at(seg["v0"], seg["lam0"], seg["slope"], lam_at[seg["last"]])
    c = jnp.where(seg["valid"], _least_log_loss(seg["S1"], seg["S0"], seg["v0"], v_end, eps), 0)
    loss = _span_sums(c, seg["first"], seg["last"], seg["valid"], n)
    n_groups = jnp.sum(real) - jnp.arange(n)
    return 2.0 * loss + n_groups * log_n


def _span_sums(c, first, last, valid, size):
    """``out[k] = sum of c_s over the valid segments s with first_s <= k <= last_s``, for
    ``k < size`` (a difference array)."""
    drop = size + 1
    diff = (
        jnp.zeros(size + 2, c.dtype)
        .at[jnp.where(valid, first, drop)]
        .add(c, mode="drop")
        .at[jnp.where(valid, last + 1, drop)]
        .add(-c, mode="drop")
    )
    return cumsum(diff)[:size]


_CHUNK = 1 << 14  # (moving segment, model) pairs scored per loop iteration


def _enir_average(w, y, s1, s0, real, n_eff, eps):
    """ENIR: the path (pass 1), then the BIC average over its breakpoint models (pass 2).

    The final (isotonic) model is scored exactly after pass 1; its BIC ``U`` bounds the best
    BIC from above. A breakpoint whose BIC lower bound exceeds ``U + 2 (40 + log M)``
    (``M`` models) has weight below ``e^-40 / M`` of the best model's, so all such models
    together move the average by less than ``e^-40`` (4e-18) relative: far below float64
    resolution. The other ``S`` models (and the final one) are scored exactly from the
    path's segments, without replaying it:

    * log-likelihood of model ``k`` = sum over the segments alive at ``k`` of
      ``-(S1 log p + S0 log(1 - p))``, ``p`` the clipped value at ``lambda_k``. Segments
      that do not move contribute a constant over their span (a difference array over the
      models); each moving segment is evaluated at the scored models in its span, ``T``
      (segment, model) pairs in all, in chunks of ``_CHUNK``;
    * the averaged value of run ``r`` = sum over the segments containing ``r`` of
      ``sum_k w_k (v0 + slope (lambda_k - lam0))`` over the span, which prefix sums of
      ``w_k`` and ``w_k lambda_k`` give in ``O(1)`` per segment; a difference array over
      the segments' run extents adds them up.

    So pass 2 costs ``O(R log R + T)``: ``T`` counts only the groups that still move at the
    scored breakpoints (about 1.5 per run at ``n = 1e5`` with IPS targets), not the ``S R``
    of scoring every run at every scored breakpoint.
    """
    path = trace_path(w, y, s1, s0, real, jnp.asarray(jnp.inf, y.dtype))
    return average_path(path, w, y, s1, s0, real, n_eff, eps)


def average_path(path: _Path, w, y, s1, s0, real, n_eff, eps):
    """Pass 2 of :func:`_enir_average` on a traced path: ``(acc, n_models, n_scored,
    lam)``, the averaged run values, the number of breakpoint models, of scored models
    and the path's last lambda."""
    return _average(path, w, y, s1, s0, real, n_eff, eps)[:4]


class _Averaged(NamedTuple):
    """Pass 2's result and what the derivative of the average needs (per segment of
    ``_segments``: its model-weight sum ``omega`` over its span and its share ``contrib``
    of the averaged values of its runs)."""

    acc: jax.Array
    n_models: jax.Array
    n_scored: jax.Array
    lam: jax.Array
    seg: dict
    omega: jax.Array
    contrib: jax.Array


def _average(path: _Path, w, y, s1, s0, real, n_eff, eps) -> _Averaged:
    """Pass 2 (:func:`average_path`), with its segments and model weights."""
    n = w.shape[0]
    log_n = jnp.log(n_eff)
    final = path_values(path, real, path.lam)
    lw_final = _log_weight(final, s1, s0, real, path.n_groups, log_n, eps)
    n_models = path.n_models + 1
    margin = 2.0 * (_LOG_W_MARGIN + jnp.log(n_models.astype(y.dtype)))
    seg = _segments(path, y, s1, s0, real)
    bound = _breakpoint_bounds(path, y, s1, s0, real, log_n, eps, seg)
    bound = jnp.concatenate([bound, jnp.zeros(1, y.dtype)])  # models k = 0 .. N
    slack = 1e-9 * (jnp.abs(bound) + jnp.abs(lw_final))
    n_ev = path.n_events
    k_all = jnp.arange(n + 1, dtype=jnp.int32)
    bp = jnp.concatenate([path.bp_lam, jnp.full(1, jnp.nan, y.dtype)])
    # the scored models: surviving breakpoints and the final model (k = E)
    scored = (k_all == n_ev) | (~jnp.isnan(bp) & (bound - slack <= -2.0 * lw_final + margin))
    lam_k = jnp.where(k_all == n_ev, path.lam, jnp.nan_to_num(bp))
    rank_of = cumsum(scored.astype(jnp.int32)) - scored  # [N + 1] rank among the scored models
    n_scored = jnp.sum(scored)
    k_of_rank = (  # the scored models in order, then N
        jnp.full(n + 1, n, jnp.int32).at[jnp.where(scored, rank_of, n + 1)].set(k_all, mode="drop")
    )

    valid, first, last = seg["valid"], seg["first"], seg["last"]
    v0, lam0, slope, S1, S0 = (seg[k] for k in ("v0", "lam0", "slope", "S1", "S0"))
    rank_lo = rank_of[first]
    rank_hi = rank_of[last] + scored[last]  # exclusive
    moving = valid & (slope != 0)

    def loss(j, lam):
        p = jnp.clip(_at(v0[j], lam0[j], slope[j], lam), eps, 1.0 - eps)
        return -(S1[j] * jnp.log(p) + S0[j] * jnp.log1p(-p))

    # static segments: one constant per segment over its ranks
    j_all = jnp.arange(valid.shape[0])
    still = valid & ~moving & (rank_hi > rank_lo)
    c_static = jnp.where(still, loss(j_all, lam0), 0.0)
    loss_rank = _span_sums(c_static, rank_lo, rank_hi - 1, still, n + 1)
    # moving segments: every (segment, scored model) pair
    count = jnp.where(moving, jnp.maximum(rank_hi - rank_lo, 0), 0)
    ends = cumsum(count)
    total = ends[-1]

    def chunk(c):
        base, acc = c
        item = base + jnp.arange(_CHUNK)
        j = jnp.minimum(searchsorted(ends, item), j_all.shape[0] - 1)
        rank = rank_lo[j] + item - (ends[j] - count[j])
        live = item < total
        rank = jnp.where(live, rank, n + 1)
        lam = lam_k[k_of_rank[jnp.minimum(rank, n)]]
        return base + _CHUNK, acc.at[rank].add(jnp.where(live, loss(j, lam), 0.0), mode="drop")

    _, loss_rank = lax.while_loop(lambda c: c[0] < total, chunk, (jnp.zeros_like(total), loss_rank))
    n_real = jnp.sum(real).astype(jnp.int32)
    lw = -loss_rank - 0.5 * (n_real - k_of_rank).astype(y.dtype) * log_n
    lw = jnp.where(jnp.arange(n + 1) < n_scored, lw, -jnp.inf)
    lse = jax.nn.logsumexp(lw)
    weight = jnp.exp(lw - lse)  # by rank
    # per-segment sums of w_k and w_k lambda_k over its span, by prefix sums over ranks
    P0 = jnp.concatenate([jnp.zeros(1, y.dtype), cumsum(weight)])
    P1 = jnp.concatenate([jnp.zeros(1, y.dtype), cumsum(weight * lam_k[k_of_rank])])
    hi = jnp.maximum(rank_hi, rank_lo)
    omega = P0[hi] - P0[rank_lo]
    lam_sum = P1[hi] - P1[rank_lo]
    contrib = jnp.where(
        valid, v0 * omega + jnp.where(slope == 0, 0.0, slope * (lam_sum - lam0 * omega)), 0.0
    )
    acc = _span_sums(contrib, seg["run_lo"], seg["run_hi"], valid, n)
    return _Averaged(acc, n_models, n_scored, path.lam, seg, omega, contrib)


def enir_average_differentiable(w, y, s1, s0, real, n_eff, eps):
    r""":func:`_enir_average`'s ``(acc, n_models, n_scored)`` with a derivative of ``acc``
    in the run weights ``w`` and run mean targets ``y`` (forward and reverse mode).

    ENIR's model selection is not differentiable (its breakpoints and BIC weights change
    with the data, and the path's structure jumps), so the derivative is that of the
    selected models: the breakpoint lambdas :math:`\lambda_k`, the model weights
    :math:`\omega_k` and each model's fused groups held fixed. A group :math:`A` of model
    :math:`k` has the value :math:`\beta_A = (\sum_{r \in A} W_r \bar y_r + \lambda_k c_A) /
    W_A` (:math:`c_A` its count of violating neighbours, signed), so

    .. math::  \dot{\mathrm{acc}}_r = \sum_k \omega_k \frac{\sum_{r' \in A_k(r)}
        \big(W_{r'} \dot{\bar y}_{r'} + \dot W_{r'} (\bar y_{r'} - \beta_{A_k(r)})\big)}
        {W_{A_k(r)}},

    summed per path segment (a group over its span of models) as pass 2 sums the values.
    ``s1``, ``s0`` (which enter the BIC only) and ``n_eff`` get no derivative."""
    avg = _average(
        trace_path(
            *(lax.stop_gradient(a) for a in (w, y, s1, s0)), real, jnp.asarray(jnp.inf, y.dtype)
        ),
        *(lax.stop_gradient(a) for a in (w, y, s1, s0)),
        real,
        n_eff,
        eps,
    )
    return _acc_with_tangent(w, y, avg), avg.n_models, avg.n_scored


@jax.custom_jvp
def _acc_with_tangent(w, y, avg: _Averaged):
    del w, y
    return avg.acc


@_acc_with_tangent.defjvp
def _acc_with_tangent_jvp(primals, tangents):
    w, y, avg = primals
    dw, dy, _ = tangents
    n = w.shape[0]
    seg = avg.seg
    zero = jnp.zeros(1, w.dtype)
    prefix = lambda v: jnp.concatenate([zero, jnp.cumsum(v)])  # noqa: E731
    lo = jnp.clip(seg["run_lo"], 0, n - 1)
    hi = jnp.clip(seg["run_hi"], lo, n - 1) + 1
    span = lambda v: (lambda p: p[hi] - p[lo])(prefix(v))  # noqa: E731
    sw = span(w)
    sn = span(w * dy + dw * y)  # d(sum W y) over the segment's runs
    sd = span(dw)
    ok = seg["valid"] & (sw > 0)
    # sum_k omega_k (sn - sd beta(lambda_k)) / W_A, with sum_k omega_k beta = contrib
    tangent = jnp.where(ok, (avg.omega * sn - sd * avg.contrib) / jnp.where(ok, sw, 1), 0.0)
    return avg.acc, _span_sums(tangent, seg["run_lo"], seg["run_hi"], seg["valid"], n)
