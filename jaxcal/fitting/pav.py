r"""Exact weighted pool-adjacent-violators (PAV) in native JAX, with groups.

The problem solved, for every group :math:`g` separately, is

.. math::  \min_{f} \sum_i w_i (y_i - f(x_i))^2
    \quad\text{s.t. } f \text{ non-decreasing in } x \text{ within each group},

with tied scores pooled (they share one fitted value, as in scikit-learn).

Algorithm (all static shapes; runs inside ``jit`` and under ``vmap``):

1. **One sort, permutation packed into the key.** XLA's CPU sort is several times faster
   for one operand than for several (an argsort or a sort carrying an index), so with x64
   the scores are mapped to order-preserving integer keys (the IEEE-754 bit trick) and
   sorted lexicographically by (group, score) with single-operand sorts of packed int64
   keys ``class << (c + b) | chunk << b | position`` (``b`` bits of position, ``c`` more
   key bits per pass, the class being the dense rank of the bits already sorted); passes
   stop once no ties are left to resolve (two passes for one 1e6-point problem). The
   runs (tie classes) are then consecutive, and their sums are sorted ``segment_sum``\ s.
   Without x64 the keys are sorted alone and each point finds its run by ``searchsorted``.
2. **PAV as a merge tree.** Runs start as blocks. At level ``l`` the sorted runs are cut
   into segments of ``2**l`` positions that are already isotonic, and each adjacent pair
   of segments is merged: only the blocks at the interface can violate, so the merged
   block at the interface absorbs its left neighbour or its right neighbour while the pair
   violates (mean of the left block ``>=`` mean of the right one, as scikit-learn pools)
   and they belong to the same group. Blocks are stored in place (sums at the block's first
   position, the end position at its first position, the start at its last), so a merge
   touches only the blocks it pools and no compaction is needed. All pairs of a level are
   merged at once (vectorised ``while_loop``); there are ``ceil(log2 n)`` levels.
   Level 0 (pairs of single runs) is element-wise on a ``[N/2, 2]`` view (no gathers or
   scatters), which saves about a fifth of the merge tree's time at 1e6 points.

**Weights.** The pooling test compares cross products of block sums (``sum(wy) * sum(w')``),
which underflow or overflow for weights far from 1. :func:`normalize_weights` therefore
divides the weights by ``2**floor(log2(max w))`` first (integer operations on the bits, so
exact, and subnormal weights are scaled too): the largest weight lies in ``[1, 2)``, the
fit does not depend on the scale of the weights, and for weights in the normal range every
result is bit-identical to the unscaled computation. Weights below ``2**-1022`` (float32:
``2**-126``) times the largest one count as zero.

**Zero-weight runs.** A run (tie class) of zero total weight cannot move the fit; its
points get the value the fitted map has at their score (as ``IsotonicCalibration``'s
``predict`` and scikit-learn's ``fit`` + ``transform``): linear interpolation between the
nearest runs with weight in the same group, constant beyond the first / last of them (0 in
a group without weight), from the values clipped to the point's bounds.

Complexity: sort ``O(n log n)``; the merge tree does ``O(n)`` work per level in the
typical case and at most ``O(n log n)`` pooling steps overall; its sequential depth is
the sum over levels of the largest number of blocks pooled at one interface (``O(log n)``
for noisy data, ``O(n)`` only for adversarial inputs such as a long increasing run followed
by one very small value). Every pooling decision is exact, so the result equals the
sequential PAV (and scikit-learn's ``IsotonicRegression``) up to float rounding of sums.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxcal._vma import varying_like
from jaxcal._weights import normalize_weights, normalize_weights_host

__all__ = [
    "PAVResult",
    "pav",
    "pav_differentiable",
    "normalize_weights_differentiable",
    "clip_to_bounds",
    "order_key",
    "normalize_weights",
    "normalize_weights_host",
]


class PAVResult(NamedTuple):
    """Output of :func:`pav` (all ``[N]`` arrays over sorted runs, ``N = 2**ceil(log2 n)``).

    Attributes:
        fitted: ``[n]`` fitted value at every input point (input order).
        run_of_point: ``[n]`` index of each point's run (tie class) in sorted order.
        run_x: ``[N]`` score of each run (``-inf`` on padding).
        run_group: ``[N]`` group position of each run (negative on padding).
        run_weight: ``[N]`` total weight of each run.
        run_value: ``[N]`` fitted value of each run.
        block_start: ``[N]`` True where a run starts a PAV block (padding runs too).
        n_runs: number of real runs (scalar int).
    """

    fitted: jax.Array
    run_of_point: jax.Array
    run_x: jax.Array
    run_group: jax.Array
    run_weight: jax.Array
    run_value: jax.Array
    block_start: jax.Array
    n_runs: jax.Array


def order_key(x: jax.Array) -> jax.Array:
    """Integer keys with the same order as the floats ``x`` (``-0.0`` == ``0.0``).

    Integer operations only: XLA folds ``x + 0.0`` into ``x`` (which would keep ``-0.0``
    apart from ``0.0``) and CPU programs treat subnormal operands as zero."""
    int_dtype = jnp.int64 if x.dtype == jnp.float64 else jnp.int32
    bits = lax.bitcast_convert_type(x, int_dtype)
    nbits = jnp.iinfo(int_dtype).bits
    bits = jnp.where(bits == jnp.iinfo(int_dtype).min, 0, bits)  # -0.0 -> 0.0
    mask = jnp.array(jnp.iinfo(int_dtype).max, int_dtype)
    return bits ^ ((bits >> (nbits - 1)) & mask)


def _positions(keys: jax.Array) -> jax.Array:
    """Order-preserving rank surrogate in [0, n): index of the first equal key when sorted."""
    return jnp.searchsorted(jnp.sort(keys), keys, side="left").astype(keys.dtype)


def _runs_searchsorted(x: jax.Array, group: jax.Array | None):
    """Run of every point (input order) without 64-bit integers (x64 disabled): sort keys,
    then ``searchsorted``. Returns ``(run, gpos)``, both ``[n]`` in input order."""
    n = x.shape[0]
    xkey = order_key(x)
    if group is None:
        key = xkey
        gpos = jnp.zeros(n, jnp.int32)
    else:
        gpos = _positions(group)
        int_max = jnp.iinfo(xkey.dtype).max
        if n * n <= int_max:
            key = gpos.astype(xkey.dtype) * n + _positions(xkey)
        else:  # large n: two-operand sort (slower, exact)
            key = None
    if key is not None:
        ks = jnp.sort(key)
        new = jnp.concatenate([jnp.ones(1, bool), ks[1:] != ks[:-1]])
        run_at_sorted = jnp.cumsum(new) - 1
        run = run_at_sorted[jnp.searchsorted(ks, key, side="left")]
    else:
        gs, xs, perm = lax.sort((gpos, xkey, jnp.arange(n)), num_keys=2)
        new = jnp.concatenate([jnp.ones(1, bool), (gs[1:] != gs[:-1]) | (xs[1:] != xs[:-1])])
        run = jnp.zeros(n, jnp.int32).at[perm].set(jnp.cumsum(new) - 1)
    return run.astype(jnp.int32), gpos.astype(jnp.int32)


def _scan(op, v: jax.Array) -> jax.Array:
    """Inclusive prefix scan; ``associative_scan`` is ~6x faster than ``cumsum`` / ``cummax``
    (``reduce_window``) on XLA's CPU backend at 1e6 points, and exact for integers."""
    return lax.associative_scan(op, v)


def _bit_length(v: jax.Array) -> jax.Array:
    """Number of significant bits of non-negative int64 ``v`` (0 for 0)."""
    return 64 - lax.clz(v)


def _unsigned_offset(key: jax.Array) -> jax.Array:
    """Order-preserving map of int64 keys to non-negative offsets from their minimum, held in
    uint64 (so that leading bits shared by all keys are never sorted)."""
    u = lax.bitcast_convert_type(key, jnp.uint64) ^ jnp.uint64(1 << 63)
    return u - jnp.min(u)


def _lex_sort(fields: list[jax.Array], n_index_bits: int):
    """Sort points by the uint64 ``fields`` (most significant first) with single-operand
    sorts of packed int64 keys, and return ``(perm, cls)`` per field.

    XLA's CPU sort of one int64 operand is several times faster than a sort that carries a
    permutation (a second operand), so the permutation travels in the key: every pass sorts
    ``class << (c + b) | chunk << b | position`` (``b = n_index_bits`` bits for the position
    in the current order, the class is the dense rank of the bits sorted so far, the chunk the
    next ``c = 63 - b - bits(class)`` bits of the field), then composes the permutation and
    re-ranks. Passes stop early once every point is alone in its class (further bits cannot
    create ties). All integers stay below ``2**63``: the keys are exact and non-negative.

    Returns:
        ``perm`` (``[n]`` sorted position -> input index) and, for each field, ``[n]`` dense
        ranks (in sorted order) of the prefix of fields up to and including that one.
    """
    n = fields[0].shape[0]
    b = n_index_bits
    pos = jnp.arange(n, dtype=jnp.int64)
    low = jnp.int64((1 << b) - 1)
    perm = pos
    cls = jnp.zeros(n, jnp.int64)
    out = []

    def sort_pass(c, field, identity: bool = False):
        perm, cls, ncls, rem = c
        width = jnp.minimum(rem, 63 - b - _bit_length(ncls - 1))
        shift = (rem - width).astype(jnp.uint64)
        mask = (jnp.uint64(1) << width.astype(jnp.uint64)) - jnp.uint64(1)
        chunk = (((field if identity else field[perm]) >> shift) & mask).astype(jnp.int64)
        key = jnp.sort((cls << (width + b)) | (chunk << b) | pos)
        perm = (key & low) if identity else perm[key & low]
        hi = key >> b
        new = jnp.concatenate([jnp.zeros(1, jnp.int64), (hi[1:] != hi[:-1]).astype(jnp.int64)])
        cls = _scan(jnp.add, new)
        return perm, cls, cls[-1] + 1, rem - width

    def cond(c):
        _, _, ncls, rem = c
        return (rem > 0) & (ncls < n)

    for k, field in enumerate(fields):
        state = (perm, cls, cls[-1] + 1, _top(field))
        if k == 0:
            # The order is still the identity: the first pass needs no gathers (~15 ms
            # each at 1e6 points). It is also correct when it has nothing to sort.
            state = sort_pass(state, field, identity=True)
        state = varying_like(state, fields)
        perm, cls, _, _ = lax.while_loop(cond, partial(sort_pass, field=field), state)
        out.append(cls)
    return perm, out


def _top(field: jax.Array) -> jax.Array:
    """Bit length of the largest uint64 value, as int64 (0..64)."""
    return (64 - lax.clz(jnp.max(field))).astype(jnp.int64)


def _sorted_runs(x: jax.Array, group: jax.Array | None):
    """Sort points by (group, x) once. Returns ``(perm, run, run_group_of_point)``: ``perm``
    maps sorted position -> input index, ``run`` ([n], non-decreasing) is the run (tie class of
    (group, x)) at each sorted position and the third array the dense group rank there."""
    n = x.shape[0]
    b = max(int(n - 1).bit_length(), 1)
    # keys of x's own dtype, widened (a float32 -> float64 cast would flush subnormals)
    xf = _unsigned_offset(order_key(x).astype(jnp.int64))
    if group is None:
        perm, (run,) = _lex_sort([xf], b)
        return perm, run, jnp.zeros(n, jnp.int64)
    gf = _unsigned_offset(group.astype(jnp.int64))
    perm, (gcls, run) = _lex_sort([gf, xf], b)
    return perm, run, gcls


_UNROLLED = 6
_CHUNK = 4


def _violates(s1y, s1w, s2y, s2w):
    """Pool adjacent blocks 1 | 2: mean(1) >= mean(2) (as scikit-learn pools), or either
    block has no weight."""
    return (s1w == 0) | (s2w == 0) | (s1y * s2w >= s2y * s1w)


def _first_level(state):
    """Level 0 of the merge tree, element-wise: runs ``2k`` and ``2k + 1`` pool when they
    violate and share a group (no gathers or scatters; same result as
    ``_merge_level(state, 0, ...)``, about a fifth of the merge tree's time otherwise)."""
    sy, sw, grp, start, end, is_start = state
    pair = lambda v: v.reshape(-1, 2)  # noqa: E731
    (y0, y1), (w0, w1), (g0, g1) = (pair(v).T for v in (sy, sw, grp))
    pool = (g0 == g1) & _violates(y0, w0, y1, w1)
    even = pair(start)[:, 0]
    flat = lambda a, b: jnp.stack([a, b], axis=1).reshape(-1)  # noqa: E731
    return (
        flat(jnp.where(pool, y0 + y1, y0), y1),
        flat(jnp.where(pool, w0 + w1, w0), w1),
        grp,
        flat(even, jnp.where(pool, even, even + 1)),
        flat(jnp.where(pool, even + 1, even), even + 1),
        flat(jnp.ones_like(pool), ~pool),
    )


def _merge_level(state, level, size: int, n_slots: int):
    """Merge every adjacent pair of isotonic segments of ``2**level`` positions.

    ``level`` may be traced (the upper levels run in one ``fori_loop``, compiled once):
    there are ``n_slots`` pair slots, of which the first ``size >> (level + 1)`` are real.
    """
    sy, sw, grp, start, end, is_start = state
    half = jnp.left_shift(1, level)
    k = jnp.arange(n_slots)
    real = k < jnp.right_shift(size, level + 1)
    a = jnp.where(real, k * 2 * half, 0)
    m = jnp.where(real, a + half, 0)
    b = jnp.where(real, a + 2 * half, 0)

    cs, ce = m, end[m]
    csy, csw, g = sy[m], sw[m], grp[m]

    def cond(c):
        return jnp.any(c[-1])

    def body(c):
        cs, ce, csy, csw, is_start, active = c
        lp = jnp.maximum(cs - 1, 0)
        ls = start[lp]
        lsy, lsw = sy[ls], sw[ls]
        left = active & (cs - 1 >= a) & (grp[lp] == g) & _violates(lsy, lsw, csy, csw)
        rp = jnp.minimum(ce + 1, size - 1)
        rsy, rsw = sy[rp], sw[rp]
        right = active & ~left & (ce + 1 < b) & (grp[rp] == g) & _violates(csy, csw, rsy, rsw)
        removed = jnp.where(left, cs, jnp.where(right, rp, size))
        is_start = is_start.at[removed].set(False, mode="drop")
        cs = jnp.where(left, ls, cs)
        ce = jnp.where(right, end[rp], ce)
        csy = csy + jnp.where(left, lsy, 0) + jnp.where(right, rsy, 0)
        csw = csw + jnp.where(left, lsw, 0) + jnp.where(right, rsw, 0)
        return cs, ce, csy, csw, is_start, left | right

    carry = varying_like((cs, ce, csy, csw, is_start, real), state)
    cs, ce, csy, csw, is_start, _ = lax.while_loop(cond, body, carry)
    drop = jnp.where(real, cs, size)
    sy = sy.at[drop].set(csy, mode="drop")
    sw = sw.at[drop].set(csw, mode="drop")
    end = end.at[drop].set(ce, mode="drop")
    start = start.at[jnp.where(real, ce, size)].set(cs, mode="drop")
    return sy, sw, grp, start, end, is_start


def pav(
    x: jax.Array,
    y: jax.Array,
    w: jax.Array,
    group: jax.Array | None = None,
    lo: jax.Array | None = None,
    hi: jax.Array | None = None,
) -> PAVResult:
    """Weighted isotonic (non-decreasing) regression of ``y`` on ``x``, per group.

    Pure and traceable (no validation here; see ``jaxcal.isotonic_regression``). The
    weights are normalised first (:func:`normalize_weights`), so the fit does not depend on
    their scale. Points with zero weight do not influence the fit; ``fitted`` gives them
    the fitted map's value at their score (module docstring).

    Args:
        x: ``[n]`` scores (float).
        y: ``[n]`` targets.
        w: ``[n]`` non-negative weights.
        group: optional ``[n]`` integer group ids; PAV never pools across groups.
        lo: optional lower bound of ``fitted`` (a scalar or ``[n]``, one per point).
        hi: optional upper bound of ``fitted`` (a scalar or ``[n]``).

    Returns:
        A :class:`PAVResult`: ``fitted`` clipped to ``[lo, hi]``; the run arrays hold the
        unclipped PAV solution (a zero-weight run has the value of the block it pooled
        with) and the normalised run weights.
    """
    n = x.shape[0]
    w = normalize_weights(w)
    size = 1 << max(int(n - 1).bit_length(), 0)
    pos = jnp.arange(size)
    if jax.config.jax_enable_x64:
        # One lexicographic sort; the per-run sums are then segment sums over sorted ids.
        perm, run_s, grp_s = _sorted_runs(x, group)
        seg = lambda v: jax.ops.segment_sum(  # noqa: E731
            v[perm], run_s, num_segments=size, indices_are_sorted=True
        )
        run = jnp.zeros(n, jnp.int32).at[perm].set(run_s.astype(jnp.int32))
        run_x = jax.ops.segment_max(x[perm], run_s, num_segments=size, indices_are_sorted=True)
        run_g = jax.ops.segment_max(grp_s, run_s, num_segments=size, indices_are_sorted=True)
        real = pos <= run_s[-1]
    else:
        run, gpos = _runs_searchsorted(x, group)
        seg = lambda v: jax.ops.segment_sum(v, run, num_segments=size)  # noqa: E731
        real = seg(jnp.ones_like(w)) > 0
        run_x = jax.ops.segment_max(x, run, num_segments=size)
        run_g = jax.ops.segment_max(gpos, run, num_segments=size)
    sy = seg(w * y)
    sw = seg(w)
    run_group = jnp.where(real, run_g.astype(jnp.int32), -1 - pos)
    sw_runs = sw
    state = varying_like((sy, sw, run_group, pos, pos, jnp.ones(size, bool)), (x, y, w))
    # The low levels (most of the work) are unrolled with exact static sizes; the remaining
    # levels run in fori_loops of _CHUNK levels, each with the pair-slot count of its first
    # level: few compiled bodies (compile time grows slowly in n), and the top levels do not
    # pay for thousands of empty slots (~8% faster at n = 2**20 than one loop for all).
    n_levels = max(size.bit_length() - 1, 0)
    if n_levels:
        state = _first_level(state)
    for level in range(1, min(n_levels, _UNROLLED)):
        state = _merge_level(state, level, size, size >> (level + 1))
    for first in range(_UNROLLED, n_levels, _CHUNK):
        slots = size >> (first + 1)
        state = lax.fori_loop(
            first,
            min(first + _CHUNK, n_levels),
            lambda lv, st, slots=slots: _merge_level(st, lv, size, slots),
            state,
        )
    sy, sw, _, _, _, is_start = state
    value_at_start = jnp.where(is_start & (sw > 0), sy / jnp.where(sw > 0, sw, 1), 0)
    block_of = _scan(jnp.maximum, jnp.where(is_start, pos, 0))
    run_value = value_at_start[block_of]
    fitted = _fitted_values(run, run_x, run_group, sw_runs, run_value, lo, hi)
    return PAVResult(
        fitted=fitted,
        run_of_point=run,
        run_x=run_x,
        run_group=run_group,
        run_weight=sw_runs,
        run_value=run_value,
        block_start=is_start,
        n_runs=jnp.sum(real),
    )


def _fitted_values(run, run_x, run_group, run_weight, run_value, lo, hi):
    """Every point's fitted value, clipped to its bounds; a point of a zero-weight run gets
    the map's value at its score: the linear interpolation between the (clipped) values of
    the nearest runs with weight in its group, or the nearest one's beyond them (0 in a
    group without weight). The formula is ``interpolate``'s (``jaxcal.calibrators.isotonic``).
    Computed per run (one gather per point) unless a bound is given per point."""
    size = run_x.shape[0]
    pos = jnp.arange(size)
    has_w = run_weight > 0
    left = _scan(jnp.maximum, jnp.where(has_w, pos, -1))
    right = _scan(jnp.minimum, jnp.where(has_w, pos, size)[::-1])[::-1]
    left_c, right_c = jnp.maximum(left, 0), jnp.minimum(right, size - 1)
    ok0 = (left >= 0) & (run_group[left_c] == run_group)
    ok1 = (right < size) & (run_group[right_c] == run_group)
    x0, x1, v0, v1 = run_x[left_c], run_x[right_c], run_value[left_c], run_value[right_c]
    arrays = (has_w, ok0, ok1, x0, x1, v0, v1, run_x, run_value)
    per_point = any(b is not None and jnp.ndim(b) > 0 for b in (lo, hi))
    if per_point:  # each point clips its neighbours' values with its own bounds
        arrays = tuple(a[run] for a in arrays)
    has_w, ok0, ok1, x0, x1, v0, v1, u, v = arrays
    clip = lambda a: a if lo is None and hi is None else clip_to_bounds(a, lo, hi)  # noqa: E731
    c0, c1 = clip(v0), clip(v1)
    dx = x1 - x0
    between = ok0 & ok1 & (dx > 0)
    t = (u - x0) / jnp.where(between, dx, 1)
    inner = jnp.where(between, c0 + t * (c1 - c0), c0)
    filled = jnp.where(ok0, inner, jnp.where(ok1, c1, clip(jnp.zeros((), v.dtype))))
    out = jnp.where(has_w, clip(v), filled)
    return out if per_point else out[run]


def clip_to_bounds(v: jax.Array, lo, hi) -> jax.Array:
    """``jnp.clip(v, lo, hi)`` (the same numbers; ``None`` is no bound) whose derivative is
    ``v``'s up to and at the bounds and the bound's beyond it: a fitted value that only
    reaches a bound (a block of 0/1 labels that are all 1) keeps its tangent, where
    ``jnp.clip`` would halve it."""
    if lo is not None:
        v = jnp.where(v < lo, lo, v)
    if hi is not None:
        v = jnp.where(v > hi, hi, v)
    return v


def pav_differentiable(
    x: jax.Array,
    y: jax.Array,
    w: jax.Array,
    group: jax.Array | None = None,
    lo: jax.Array | None = None,
    hi: jax.Array | None = None,
) -> PAVResult:
    r""":func:`pav` with derivatives: the same :class:`PAVResult`, whose ``fitted``,
    ``run_x``, ``run_weight`` and ``run_value`` carry a ``jax.custom_jvp`` (forward and
    reverse mode, under ``jit`` and ``vmap``).

    The merge tree itself is not differentiated: its ``while_loop`` s only decide the
    blocks, and for fixed blocks the fit is a smooth function of the data. A block
    :math:`B`'s value is the weighted mean of its targets, :math:`f_B = \sum_B w_i y_i /
    \sum_B w_i`, so

    .. math::  \dot f_B = \frac{\sum_{i \in B} \big(w_i \dot y_i
        + \dot w_i (y_i - f_B)\big)}{\sum_{i \in B} w_i},

    with zero tangent with respect to ``x`` (the fit is piecewise constant in the scores:
    it depends on their order only), and, where a bound clips the value, the bound's
    tangent instead (zero with respect to ``y`` and ``w``). A point of a zero-weight run
    gets the derivative of its interpolated value (``jaxcal.fitting.pav`` module
    docstring), which does depend on the scores: on its own and on those of the
    neighbouring runs it interpolates between. Tied scores share one run, whose score
    tangent is the mean of theirs. This is the exact derivative wherever the blocks do not
    change under a small perturbation: no two adjacent blocks have equal means (then PAV
    pools them at the one point and not at its neighbours) and no tied scores are pulled
    apart. The derivative with respect to a weight that is zero is one-sided (as if the
    point had a small positive weight in the block PAV pooled it with).

    Args:
        x, y, w, group, lo, hi: as in :func:`pav`.

    Returns:
        The :class:`PAVResult` of :func:`pav` (the same numbers).
    """
    r = pav(
        *(lax.stop_gradient(a) for a in (x, y, w)),
        group,
        *(None if b is None else lax.stop_gradient(b) for b in (lo, hi)),
    )
    fitted, run_x, run_weight, run_value = _with_tangents(x, y, w, lo, hi, r)
    return r._replace(fitted=fitted, run_x=run_x, run_weight=run_weight, run_value=run_value)


@jax.custom_jvp
def _with_tangents(x, y, w, lo, hi, r: PAVResult):
    """``r``'s differentiable arrays as they are; the tangents come from
    :func:`_smooth_fit` (``r`` fixes the runs and blocks)."""
    del x, y, w, lo, hi
    return r.fitted, r.run_x, r.run_weight, r.run_value


@_with_tangents.defjvp
def _with_tangents_jvp(primals, tangents):
    x, y, w, lo, hi, r = primals
    dx, dy, dw, dlo, dhi, _ = tangents

    def smooth(x, y, w, bounds):
        return _smooth_fit(x, y, normalize_weights_differentiable(w), *bounds, r)

    _, out_tangents = jax.jvp(smooth, (x, y, w, (lo, hi)), (dx, dy, dw, (dlo, dhi)))
    return (r.fitted, r.run_x, r.run_weight, r.run_value), out_tangents


def normalize_weights_differentiable(w: jax.Array) -> jax.Array:
    """:func:`normalize_weights` (the same numbers) with the derivative of ``w / 2**e``:
    the tangent ``dw / 2**e`` (the exponent ``e`` is piecewise constant; the integer
    operations of :func:`normalize_weights` alone would give no tangent). One problem per
    call (``[n]``; ``vmap`` for more)."""
    wn = normalize_weights(lax.stop_gradient(w))
    top = jnp.max(lax.stop_gradient(w))
    scale = jnp.where(top > 0, jnp.max(wn) / jnp.where(top > 0, top, 1), 1)
    return wn + (w - lax.stop_gradient(w)) * lax.stop_gradient(scale)


def _smooth_fit(x, y, wn, lo, hi, r: PAVResult):
    """The fit recomputed from sums over the runs and blocks that ``r`` fixes: a smooth
    function of the scores, targets, normalised weights and bounds, equal to ``r``'s
    arrays up to the rounding of the sums (differentiated by :func:`pav_differentiable`)."""
    size = r.run_x.shape[0]
    run = r.run_of_point
    seg = lambda v: jax.ops.segment_sum(v, run, num_segments=size)  # noqa: E731
    count = seg(jnp.ones_like(x))
    # the run's score as pav has it, with the mean tangent of its tied points (padding runs,
    # -inf in r, at 0: an infinite operand would make the reverse mode's zeros NaN)
    run_x = jnp.where(count > 0, r.run_x, 0) + seg(x - lax.stop_gradient(x)) / jnp.maximum(count, 1)
    sw, sy = seg(wn), seg(wn * y)
    pos = jnp.arange(size)
    block = _scan(jnp.maximum, jnp.where(r.block_start, pos, 0))
    bsum = lambda v: jax.ops.segment_sum(  # noqa: E731
        v, block, num_segments=size, indices_are_sorted=True
    )[block]
    bw, by = bsum(sw), bsum(sy)
    run_value = jnp.where(bw > 0, by / jnp.where(bw > 0, bw, 1), 0)
    # which runs have weight is part of the structure: r's (normalised) run weights
    fitted = _fitted_values(run, run_x, r.run_group, r.run_weight, run_value, lo, hi)
    return fitted, run_x, sw, run_value
