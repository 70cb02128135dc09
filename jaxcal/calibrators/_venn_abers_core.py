r"""The functional core of the Venn-Abers predictors (:class:`jaxcal.VennAbers`).

A Venn-Abers predictor (Vovk & Petej 2014) calibrates a test score :math:`t` by two isotonic
regressions: the calibration data plus the test point with the hypothetical label 0, and
plus the test point with label 1; :math:`p_0(t)` and :math:`p_1(t)` are the two fits at
:math:`t`. Both are computed here for *every* test position at once, in
:math:`O(n \log n)` (the sort) plus :math:`O(n)` (two sequential sweeps), the construction
of Vovk, Petej & Fedorova (2015, Section 2): isotonic fits as slopes of the greatest convex
minorant (GCM) of the cumulative sum diagram (CSD).

**The CSD.** A problem's positive-weight calibration points, sorted by score and pooled
into runs of tied scores :math:`u_1 < \dots < u_m` (weights :math:`w_r`, weighted label
sums :math:`y_r`), give the points :math:`P_j = (W_j, Y_j)`, :math:`W_j = \sum_{r \le j}
w_r`, :math:`Y_j = \sum_{r \le j} y_r`, :math:`j = 0..m`. The test point has weight
:math:`\omega` (the mean calibration weight of its problem: 1 without weights) and label
:math:`\ell`.

**Label 1.** A test score with :math:`i - 1` runs below it (``searchsorted(u, t, "left")
= i - 1``) joins run :math:`i` (a score strictly between :math:`u_{i-1}` and :math:`u_i`
gives the same fit: the label-1 point pools with the run to its right). The fitted value is
the slope of the bridge between :math:`L_i = \{P_0..P_{i-1}\}` and
:math:`R_i = \{P_i + (\omega, \omega), \dots, P_m + (\omega, \omega)\}`,

.. math::  p_1 = \max_{a < i} \min_{b \ge i} \frac{Y_b - Y_a + \omega}{W_b - W_a + \omega},

and :math:`p_1 = 1` above all runs. As :math:`i` grows, :math:`L` gains :math:`P_{i-1}`
and :math:`R` loses a point: if :math:`P_{i-1}` lies on or above the current bridge line,
the bridge stays; otherwise the new bridge starts at :math:`P_{i-1}` (a line through an
earlier left point and a right point would pass above it), with slope
:math:`T(i-1) = \min_{b \ge i} \operatorname{slope}(P_{i-1} - (\omega,\omega), P_b)`, the
tangent from :math:`P_{i-1} - (\omega, \omega)` to the lower hull of
:math:`P_i..P_m`. That hull is a chain of successor pointers (``next``, one sweep from the
right with a stack), and the tangent points of successive resets move right along it (the
new left point lies below the old bridge line, so no right point before the old tangent
point can be tangent), so one two-pointer sweep from the left finds them all: every
pointer step moves right.

**Label 0** is label 1 of the mirrored problem (runs in reverse order, labels
:math:`1 - y`): :math:`p_0(t) = 1 - p_1'(t)`, with ``searchsorted(u, t, "right")`` runs
at or below :math:`t` (the label-0 point pools with the run to its left).

All problems (groups, folds) lie in one flat sequence of ``R + P`` points (``R`` runs,
``P`` problems; every problem starts with its :math:`P_0`), swept once per orientation (the
problems as given, then their mirror images): each sweep is a ``fori_loop`` whose
data-dependent inner steps (stack pops, pointer steps) are amortised :math:`O(1)`. The
runs come from one host sort (of packed 64-bit keys ``problem | score | label`` for float32
scores with equal weights). A lookup is then one binary search per test score and fold
(:func:`va_lookup`): the count of runs below the score gives :math:`p_1`, that count plus
a tie gives :math:`p_0`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._native import va_tables_cpu, venn_abers_cpu_available
from jaxcal._vma import varying_like
from jaxcal.fitting.isotonic import eager_kernel

__all__ = [
    "VennAbersTables",
    "fit_tables",
    "fit_tables_pure",
    "va_tables",
    "va_tables_pure",
    "va_lookup",
]


class VennAbersTables(NamedTuple):
    """Lookup tables of ``P`` problems (host or device arrays, padded to bucket sizes).

    Attributes:
        edges: ``[R]`` run scores, sorted within each problem (problems one after another).
        p0: ``[R + P]`` :math:`p_0` for ``searchsorted(edges_p, t, "right") = j`` at
            ``run_start[p] + p + j``.
        p1: ``[R + P]`` :math:`p_1` for ``searchsorted(edges_p, t, "left") = j``, same place.
        run_start: ``[P]`` first run of each problem in ``edges``.
        run_count: ``[P]`` number of runs of each problem.
    """

    edges: jax.Array
    p0: jax.Array
    p1: jax.Array
    run_start: jax.Array
    run_count: jax.Array


def _hull_next(W, Y, last):
    """``next[k]``: the successor of :math:`P_k` on the lower convex hull of the points from
    :math:`P_k` to the end of its problem (``k`` itself at the end). One sweep from the
    right; the stack holds the hull of the points already seen. Every read of the stack
    happens inside the inner loop, so XLA updates it in place (a read outside the loop
    made it copy the stack on every step)."""
    n = W.shape[0]

    def point(i, carry):
        stack, top, nxt = carry
        k = n - 1 - i
        top = jnp.where(last[k], 0, top)
        wk, yk = W[k], Y[k]

        def step(c):
            t, _, _ = c
            a = stack[jnp.maximum(t - 1, 0)]
            b = stack[jnp.maximum(t - 2, 0)]
            # a leaves the hull if k -> a turns no less steeply than a -> b
            pop = (t >= 2) & ((Y[a] - yk) * (W[b] - W[a]) >= (Y[b] - Y[a]) * (W[a] - wk))
            return jnp.where(pop, t - 1, t), jnp.where(t >= 1, a, k), ~pop

        start = varying_like((top, k, jnp.bool_(False)), W, Y, last)
        top, succ, _ = lax.while_loop(lambda c: ~c[2], step, start)
        return stack.at[top].set(k), top + 1, nxt.at[k].set(succ)

    zeros = jnp.zeros(n, jnp.int32)
    init = varying_like((zeros, jnp.int32(0), zeros), W, Y, last)  # inside shard_map
    return lax.fori_loop(0, n, point, init)[2]


def _sweep(W, Y, omega, first, last, nxt, *, indices: bool = False):
    r""":math:`p_1` at every point (the test point joining the next run; 1 at a problem's
    last point): the bridge resets of the module docstring, with the tangent pointer
    walking right along ``nxt``. ``indices``: return instead the bridge of every point,
    ``(anchor, tangent)``: :math:`p_1 = (Y_b - Y_a + \omega) / (W_b - W_a + \omega)` with
    ``a`` the last reset point and ``b`` its tangent point (:func:`_label_one_pure`)."""
    n = W.shape[0]
    one = jnp.ones((), W.dtype)

    def point(k, carry):
        aw, ay, slope, b, out = carry[:5]
        wk, yk = W[k], Y[k]
        reset = first[k] | (yk - ay < slope * (wk - aw))
        xw, xy = wk - omega[k], yk - omega[k]  # P_k - (omega, omega)
        walk = reset & ~last[k]

        def further(b):  # the next hull vertex is no steeper from X than b itself
            m = nxt[b]
            lower = (Y[m] - Y[b]) * (W[b] - xw) <= (Y[b] - xy) * (W[m] - W[b])
            return walk & ~last[b] & lower

        start = jnp.minimum(jnp.maximum(jnp.where(first[k], k + 1, b), k + 1), n - 1)
        b_new = lax.while_loop(further, lambda b: nxt[b], start)
        tangent = (Y[b_new] - xy) / (W[b_new] - xw)
        slope = jnp.where(last[k], one, jnp.where(reset, tangent, slope))
        b = jnp.where(reset, b_new, b)
        aw, ay = jnp.where(reset, wk, aw), jnp.where(reset, yk, ay)
        if not indices:
            return aw, ay, slope, b, out.at[k].set(slope)
        a, anchor, tangent = carry[5:]
        a = jnp.where(reset, k, a)
        return aw, ay, slope, b, out, a, anchor.at[k].set(a), tangent.at[k].set(b)

    zero = jnp.zeros((), W.dtype)
    init = (zero, zero, zero, jnp.int32(0), jnp.zeros_like(W))
    data = (W, Y, omega, first, last, nxt)
    if not indices:
        init = varying_like(init, *data)  # inside shard_map: the carry varies as the data
        return lax.fori_loop(0, n, point, init)[4]
    none = jnp.zeros(n, jnp.int32)
    init = varying_like((*init, jnp.int32(0), none, none), *data)  # inside shard_map
    return lax.fori_loop(0, n, point, init)[6:]


def _csd(inc_w, inc_y, first, last):
    """The CSD coordinates ``(W, Y)`` within each problem and what remains of them to the
    problem's end, ``(W_m - W, Y_m - Y)``: a forward and a backward ``lax.scan``."""

    def forward(c, v):
        w, y, f = v
        c = (jnp.where(f, 0, c[0]) + w, jnp.where(f, 0, c[1]) + y)
        return c, c

    def backward(c, v):
        w, y, is_last = v
        c = (jnp.where(is_last, w, c[0]), jnp.where(is_last, y, c[1]))
        return c, c

    zero = varying_like(jnp.zeros((), inc_w.dtype), inc_w, inc_y)  # inside shard_map
    _, (W, Y) = lax.scan(forward, (zero, zero), (inc_w, inc_y, first))
    _, (tot_w, tot_y) = lax.scan(backward, (zero, zero), (W, Y, last), reverse=True)
    return W, Y, tot_w - W, tot_y - Y


def _label_one(W, Y, omega, first, last):
    return _sweep(W, Y, omega, first, last, _hull_next(W, Y, last))


def _label_one_pure(W, Y, omega, first, last):
    r""":func:`_label_one` with exact derivatives: the sweeps find every point's bridge
    ``(a, b)`` on the values alone (``stop_gradient``: which points bridge is piecewise
    constant in the data), then :math:`p_1 = (Y_b - Y_a + \omega_a) / (W_b - W_a +
    \omega_a)` is evaluated on the differentiable ``W``, ``Y`` and ``omega``. Reverse mode
    then needs no derivative of the loops."""
    Wc, Yc = lax.stop_gradient(W), lax.stop_gradient(Y)
    a, b = _sweep(Wc, Yc, omega, first, last, _hull_next(Wc, Yc, last), indices=True)
    slope = (Y[b] - Y[a] + omega[a]) / (W[b] - W[a] + omega[a])
    return jnp.where(last, jnp.ones((), W.dtype), slope)


def va_tables_pure(inc_w, inc_y, omega, first, last):
    """:func:`va_tables` in JAX alone, differentiable: the portable sweeps (never the
    compiled kernel), with the tables evaluated from each point's bridge
    (:func:`_label_one_pure`), so that ``jvp`` / ``grad`` with respect to the increments
    and ``omega`` are exact wherever the bridges do not change (everywhere but on a set of
    measure zero of the data: ties of slopes). Same arguments and result as
    :func:`va_tables`; runs inside ``jit``, ``vmap`` and ``jax.export``."""
    W, Y, rem_w, rem_y = _csd(inc_w, inc_y, first, last)
    p1 = _label_one_pure(W, Y, omega, first, last)
    rev = lambda a: a[::-1]  # noqa: E731
    mirror = _label_one_pure(rev(rem_w), rev(rem_w - rem_y), rev(omega), rev(last), rev(first))
    return 1 - rev(mirror), p1


@functools.partial(jit, static_argnames=("kernel",), xla_defaults=True)
def va_tables(inc_w, inc_y, omega, first, last, *, kernel: str = "portable"):
    """``(p0, p1)`` at every point of the flat layout of :func:`fit_tables`.

    Args:
        inc_w, inc_y: ``[N]`` the CSD increments: a run's weight and weighted label sum at
            its point, 0 at every problem's :math:`P_0`.
        omega: ``[N]`` the test point's weight at every point (its problem's).
        first, last: ``[N]`` whether a point is :math:`P_0` / :math:`P_m` of its problem.
        kernel: ``"cpu"``: the compiled CPU kernel (``jaxcal._native.va_tables_cpu``, the
            same sweeps as plain loops: 1.8x faster at 1e6 points), ``"portable"``: the
            ``lax`` loops below (every backend).
    """
    if kernel == "cpu":
        return va_tables_cpu(inc_w, inc_y, omega, first, last)
    W, Y, rem_w, rem_y = _csd(inc_w, inc_y, first, last)
    p1 = _label_one(W, Y, omega, first, last)
    # label 0 is label 1 of the mirror image: runs reversed, labels 1 - y
    rev = lambda a: a[::-1]  # noqa: E731
    mirror = _label_one(rev(rem_w), rev(rem_w - rem_y), rev(omega), rev(last), rev(first))
    return 1 - rev(mirror), p1


def _count_below(edges, lo, cnt, t):
    """How many of ``edges[lo : lo + cnt]`` (sorted, distinct) are ``< t``, and whether the
    next one equals ``t``: a branch-free binary search per entry, as many steps as the
    largest ``cnt`` has bits."""
    size = edges.shape[0]
    steps = 32 - lax.clz(jnp.max(cnt).astype(jnp.int32))

    def body(i, c):
        cand = c + jnp.left_shift(1, steps - 1 - i)
        e = edges[jnp.clip(lo + cand - 1, 0, size - 1)]
        return jnp.where((cand <= cnt) & (e < t), cand, c)

    start = varying_like(jnp.zeros(jnp.shape(t), jnp.int32), edges, lo, cnt, t)  # shard_map
    below = lax.fori_loop(0, steps, body, start)
    tie = (below < cnt) & (edges[jnp.clip(lo + below, 0, size - 1)] == t)
    return below, tie


@functools.partial(jit, static_argnames=("n_folds", "want"))
def va_lookup(edges, p0, p1, run_start, run_count, t, per_row, *, n_folds: int, want: str):
    """The Venn-Abers interval or merged probability of test scores.

    Args:
        edges, p0, p1, run_start, run_count: a :class:`VennAbersTables`.
        t: ``[Q, C]`` test scores (transformed like the edges), in batch-row order:
            query ``q`` belongs to row ``q // per_row``; ``C`` is ``n_folds`` (a score per
            fold) or 1 (one score for every fold).
        per_row: queries per batch row (``Q`` for one problem).
        n_folds: ``K``; the folds' intervals are combined by geometric means (Vovk, Petej
            & Fedorova 2015, Section 4).
        want: ``"interval"`` (returns ``(lo, hi)``) or ``"predict"`` (returns ``(p,)``).

    Returns:
        ``[Q]`` arrays: for ``K = 1`` the interval :math:`[p_0, p_1]` and
        :math:`p = p_1 / (1 - p_0 + p_1)`; for ``K > 1`` :math:`hi = GM(p_1)`,
        :math:`lo = 1 - GM(1 - p_0)` and :math:`p = GM(p_1) / (GM(1 - p_0) + GM(p_1))`,
        which is the same merge formula of ``(lo, hi)``.
    """
    n_rows = run_start.shape[0] // n_folds
    row = jnp.minimum(jnp.arange(t.shape[0], dtype=jnp.int32) // per_row, n_rows - 1)
    problem = row[:, None] * n_folds + jnp.arange(n_folds, dtype=jnp.int32)[None, :]
    t = jnp.broadcast_to(t, problem.shape)
    start = run_start[problem]
    base = start + problem  # the problem's P_0 in the point layout
    below, tie = _count_below(edges, start, run_count[problem], t)
    q1 = p1[base + below]  # runs < t
    q0 = p0[base + below + tie]  # runs <= t (the runs are distinct)
    if n_folds == 1:
        lo, hi = q0[:, 0], q1[:, 0]
        one_minus_lo = 1 - lo
    else:  # q1 > 0 and q0 < 1 always (the test point carries weight): finite logs
        hi = jnp.exp(jnp.mean(jnp.log(q1), axis=1))
        one_minus_lo = jnp.exp(jnp.mean(jnp.log1p(-q0), axis=1))
        lo = 1 - one_minus_lo
    if want == "interval":
        return lo, hi
    return (hi / (one_minus_lo + hi),)


_TOP = np.uint32(1 << 31)
_LOW = np.uint32((1 << 31) - 1)


def _packed_runs(s, y, problem, n_problems):
    """Runs of float32 scores with equal weights from one sort of packed keys
    ``problem << 33 | order_key(score) << 1 | label`` (the permutation is never needed: a
    third of the time of an argsort and a stable sort). ``order_key`` flips the bits of
    negative floats and the sign bit of the others (an unsigned order equal to the float
    order, ``-0.0`` made ``0.0`` first). Returns ``(edges, counts of points, label counts,
    problem)`` per run."""
    bits = (s.astype(np.float32) + np.float32(0.0)).view(np.uint32)
    order = bits ^ ((bits >> np.uint32(31)) * _LOW | _TOP)
    key = order.astype(np.uint64) << np.uint64(1)
    key |= y.astype(np.uint64)
    if n_problems > 1:
        key |= problem.astype(np.uint64) << np.uint64(33)
    key.sort()
    run_key = key >> np.uint64(1)
    new = np.empty(key.shape[0], bool)
    new[0] = True
    np.not_equal(run_key[1:], run_key[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    size_of_run = np.diff(starts, append=key.shape[0])
    ones = np.cumsum((key & np.uint64(1)).astype(np.int64))[np.r_[starts[1:], key.shape[0]] - 1]
    ones = np.diff(ones, prepend=0).astype(np.float64)
    head = run_key[starts]
    order = head.astype(np.uint32)  # the low 32 bits
    bits = order ^ (((order >> np.uint32(31)) ^ np.uint32(1)) * _LOW | _TOP)
    edges = bits.view(np.float32).astype(np.float64)
    run_prob = (head >> np.uint64(32)).astype(np.int64)
    return edges, size_of_run, ones, run_prob


def _runs(s, y, w, problem, n_problems):
    """Per run (tie class of (problem, score), sorted): ``(edges, weight, weighted label
    sum, number of points, problem)``."""
    equal = w.min() == w.max()
    if equal and n_problems < (1 << 30) and np.array_equal(s.astype(np.float32), s):
        edges, size_of_run, ones, run_prob = _packed_runs(s, y, problem, n_problems)
        return edges, size_of_run * w[0], ones * w[0], size_of_run, run_prob
    order = np.argsort(s)
    if n_problems > 1:  # then a stable sort of the problem codes (radix for 16 bits)
        code = problem[order].astype(np.int16 if n_problems < (1 << 15) else np.int64)
        order = order[np.argsort(code, kind="stable")]
    s, y, pr = s[order], y[order], problem[order]
    new = np.empty(s.shape[0], bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    new[1:] |= pr[1:] != pr[:-1]
    starts = np.flatnonzero(new)
    size_of_run = np.diff(starts, append=s.shape[0])
    if equal:
        rw, ry = size_of_run * w[0], np.add.reduceat(y, starts) * w[0]
    else:
        w = w[order]
        rw, ry = np.add.reduceat(w, starts), np.add.reduceat(w * y, starts)
    return s[starts], rw, ry, size_of_run, pr[starts]


def fit_tables(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    problem: np.ndarray,
    n_problems: int,
    *,
    dtype=None,
) -> VennAbersTables:
    """The lookup tables of ``n_problems`` Venn-Abers problems (host preparation in
    float64, then :func:`va_tables` in ``dtype``).

    Args:
        scores: ``[n]`` validated scores (float64 holding working-dtype values).
        labels: ``[n]`` 0/1 labels.
        weights: ``[n]`` non-negative weights (zero-weight points are left out).
        problem: ``[n]`` problem codes in ``[0, n_problems)``.
        n_problems: ``P``.
        dtype: the dtype of the tables (default: JAX's default float).

    Returns:
        The device tables, padded to bucket sizes (padding points are empty problems).

    Example:
        >>> import numpy as np
        >>> from jaxcal.calibrators._venn_abers_core import fit_tables
        >>> s, y = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.0, 1.0, 0.0, 1.0])
        >>> tables = fit_tables(s, y, np.ones(4), np.zeros(4, np.int64), 1)
        >>> int(tables.run_count[0]), tables.p1[:5].tolist()  # p1 below each run, then above
        (4, [0.5, 0.667, 0.667, 1.0, 1.0])
    """
    if not weights.min() > 0:
        keep = weights > 0
        scores, labels, weights, problem = scores[keep], labels[keep], weights[keep], problem[keep]
    edges, rw, ry, size_of_run, run_prob = _runs(scores, labels, weights, problem, n_problems)
    n_runs = edges.shape[0]
    counts = np.bincount(run_prob, minlength=n_problems)
    n_points_of = np.bincount(run_prob, size_of_run, minlength=n_problems)
    sum_w = np.bincount(run_prob, rw, minlength=n_problems)
    omega = np.where(n_points_of > 0, sum_w / np.maximum(n_points_of, 1), 1.0)
    run_start = np.cumsum(counts) - counts
    n = n_runs + n_problems
    size = _shapes.padded_size(n)
    p_start = run_start + np.arange(n_problems)  # P_0 of each problem
    p_end = p_start + counts
    # CSD increments per point (padding: empty problems), cumulated on the device
    dtype = np.dtype(jnp.result_type(float) if dtype is None else dtype)
    inc_w, inc_y = np.zeros(size, dtype), np.zeros(size, dtype)
    at = np.arange(1, n_runs + 1) + run_prob
    inc_w[at], inc_y[at] = rw, ry
    first, last = np.ones(size, bool), np.ones(size, bool)
    first[:n], last[:n] = False, False
    first[p_start], last[p_end] = True, True
    lengths = np.r_[counts + 1, np.ones(size - n, np.int64)]
    p0, p1 = va_tables(
        inc_w,
        inc_y,
        np.repeat(np.r_[omega, np.ones(size - n)].astype(dtype), lengths),
        first,
        last,
        kernel=eager_kernel(venn_abers_cpu_available()),
    )
    edges = _shapes.pad_axis(edges.astype(dtype), _shapes.padded_size(n_runs), 0.0)
    p_size = _shapes.padded_size(n_problems, minimum=1)
    return VennAbersTables(
        edges=jax.device_put(edges),
        p0=p0,
        p1=p1,
        run_start=jax.device_put(_shapes.pad_axis(run_start, p_size, 0).astype(np.int32)),
        run_count=jax.device_put(_shapes.pad_axis(counts, p_size, 0).astype(np.int32)),
    )


def fit_tables_pure(
    scores: jax.Array,
    labels: jax.Array,
    weights: jax.Array,
    problem: jax.Array,
    n_problems: int,
) -> VennAbersTables:
    """:func:`fit_tables` in JAX alone (no host sort, no padding to buckets, no compiled
    kernel): it runs on tracers, inside ``jit``, ``vmap``, ``grad`` and ``jax.export``.

    The ``n`` points are sorted by (zero weight last, problem, score) and pooled into runs
    of tied scores in the program; the tables have fixed sizes: ``edges`` ``[n]`` (the
    ``R <= n`` runs, then zeros), ``p0``, ``p1`` ``[n + P]`` (the ``R + P`` points of the
    flat layout, then empty problems), ``run_start``, ``run_count`` ``[P]``. The values of
    the tables are those of :func:`fit_tables`, and are differentiable in the labels and
    weights (:func:`va_tables_pure`).

    Args:
        scores, labels, weights: ``[n]`` arrays of one float dtype (labels 0/1, weights
            non-negative: zero-weight points are left out).
        problem: ``[n]`` integer problem codes in ``[0, n_problems)``.
        n_problems: ``P`` (static).

    Returns:
        The tables of the ``P`` problems, in the scores' dtype.
    """
    n, dtype = scores.shape[0], scores.dtype
    P = int(n_problems)
    problem = jnp.asarray(problem).astype(jnp.int32)
    pos = weights > 0
    order = jnp.lexsort((scores, problem, ~pos))  # positive weights first
    ss, yy, ww, pp, ok = scores[order], labels[order], weights[order], problem[order], pos[order]
    idx = jnp.arange(n, dtype=jnp.int32)
    differs = (ss[1:] != ss[:-1]) | (pp[1:] != pp[:-1])
    new = ok & jnp.concatenate([jnp.ones(1, bool), differs])
    run = jnp.cumsum(new.astype(jnp.int32)) - 1
    n_runs = jnp.sum(new.astype(jnp.int32))
    run_id = jnp.where(ok, run, n)  # out of range: dropped
    rw = jax.ops.segment_sum(ww, run_id, num_segments=n)
    ry = jax.ops.segment_sum(ww * yy, run_id, num_segments=n)
    edges = jnp.zeros(n, dtype).at[run_id].set(ss, mode="drop")
    run_prob = jnp.full(n, P, jnp.int32).at[run_id].set(pp, mode="drop")
    by_problem = jnp.where(ok, pp, P)
    counts = jax.ops.segment_sum(new.astype(jnp.int32), by_problem, num_segments=P)
    n_points_of = jax.ops.segment_sum(ok.astype(dtype), by_problem, num_segments=P)
    sum_w = jax.ops.segment_sum(ww, by_problem, num_segments=P)
    omega = jnp.where(n_points_of > 0, sum_w / jnp.maximum(n_points_of, 1), 1.0)
    run_start = jnp.cumsum(counts) - counts
    size = n + P
    p_start = run_start + jnp.arange(P, dtype=jnp.int32)  # P_0 of each problem
    p_end = p_start + counts
    used = n_runs + P
    at = jnp.where(idx < n_runs, idx + 1 + run_prob, size)  # runs past P_0 of their problem
    inc_w = jnp.zeros(size, dtype).at[at].set(rw, mode="drop")
    inc_y = jnp.zeros(size, dtype).at[at].set(ry, mode="drop")
    point = jnp.arange(size, dtype=jnp.int32)
    padding = point >= used
    first = jnp.zeros(size, bool).at[p_start].set(True) | padding
    last = jnp.zeros(size, bool).at[p_end].set(True) | padding
    point_problem = jnp.clip(jnp.searchsorted(p_start, point, side="right") - 1, 0, P - 1)
    omega_at = jnp.where(padding, jnp.ones((), dtype), omega[point_problem])
    p0, p1 = va_tables_pure(inc_w, inc_y, omega_at, first, last)
    return VennAbersTables(
        edges=edges, p0=p0, p1=p1, run_start=run_start.astype(jnp.int32), run_count=counts
    )
