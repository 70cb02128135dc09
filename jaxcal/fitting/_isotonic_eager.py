"""The host side of an eager isotonic fit (:func:`jaxcal.fitting.isotonic.isotonic_regression`
and the knots of ``IsotonicCalibration``), in NumPy: the inputs padded to their size bucket
(``jaxcal._shapes``) for the compiled kernel or the merge tree, the clipping bounds, dense
ranks for scores that a cast to float32 would merge, and the zero-weight points' values
after a fit on ranks."""

from __future__ import annotations

import numpy as np

from jaxcal import _shapes
from jaxcal._weights import normalize_weights_host

__all__ = ["bound", "interpolate_zero_weight", "kernel_inputs", "order_keys", "pad_top"]


def pad_top(x, y, w, group, size: int, increasing: bool):
    """Pad to ``size`` with zero-weight copies of the top score (the largest, or the smallest
    for a decreasing fit): exact, since a zero-weight point tied with the top run changes no
    run sum and no run count. Host-side (NumPy)."""
    top = int(np.argmax(x) if increasing else np.argmin(x))
    # the last id keeps contiguous groups contiguous (the kernel then skips its group sort)
    fills = [x[top], 0.0, 0.0] + ([] if group is None else [group[-1]])
    arrays = [x, y, w] + ([] if group is None else [group])
    out = _shapes.pad_rows(size, *arrays, fills=fills)
    return (*out[:3], None if group is None else out[3])


def kernel_inputs(x, y, w, group, size: int, increasing: bool, dtype):
    """The padded inputs of an eager call of the kernel, each written once into a buffer of
    ``size``: the scores oriented (``-x`` for a decreasing fit, so that the program makes no
    pass of its own) in ``dtype``, the targets, the weights (``None``: ones) and the group
    ids. The padding points copy the last point's score and group with zero weight: exact
    (they join its run and add nothing to its sums), and the run keeps its weight, so the
    kernel takes no zero-weight path for them. Host-side (NumPy)."""
    n = x.shape[0]

    def padded(values, fill, dt=dtype, negate=False):
        out = _shapes.host_buffer(size, dt)  # transferred without a copy
        if negate:
            np.negative(values, out=out[:n])
        else:
            out[:n] = values
        out[n:] = out[n - 1] if fill is None else fill
        return out

    u = padded(x, None, negate=not increasing)
    weights = padded(1.0 if w is None else w, 0.0)
    if w is not None and np.dtype(dtype) != w.dtype:  # the cast may round the largest to 2
        weights = normalize_weights_host(weights)
    g = None if group is None else padded(group, None, dt=group.dtype)
    return u, padded(y, 0.0), weights, g


def order_keys(x: np.ndarray, dtype) -> np.ndarray | None:
    """Dense ranks of ``x`` (float64) if the cast to ``dtype`` would merge distinct values
    of ``x`` or overflow them (float64 scores closer than float32's spacing, or beyond its
    range); ``None`` if the cast keeps every distinct value distinct and in order. The
    isotonic fit depends on the order of ``x`` only, so ranks give it exactly (up to
    ``2**24`` distinct scores in float32). One ``np.unique``, only when the cast is inexact."""
    if np.dtype(dtype) == np.float64:
        return None
    with np.errstate(over="ignore"):
        if np.array_equal(x.astype(dtype), x):
            return None
        u, inv = np.unique(x, return_inverse=True)
        cu = u.astype(dtype)
    if np.all(np.isfinite(cu)) and np.all(cu[1:] > cu[:-1]):
        return None
    return inv.reshape(-1).astype(np.float64)


def interpolate_zero_weight(x, fitted, zero, group):
    """Fitted values of zero-weight points after a fit on ranks: the map's value at their
    score, in float64 (linear between the nearest points with weight in their group, by
    score; constant beyond them; 0 in a group without weight), as the PAV paths give it."""
    n = x.shape[0]
    g = np.zeros(n, np.int64) if group is None else group
    order = np.lexsort((x, g))
    xs, gs, fs, zs = x[order], g[order], fitted[order].astype(np.float64), zero[order]
    idx = np.arange(n)
    prev = np.maximum.accumulate(np.where(zs, -1, idx))
    nxt = np.minimum.accumulate(np.where(zs, n, idx)[::-1])[::-1]
    p, q = np.maximum(prev, 0), np.minimum(nxt, n - 1)
    has_p = (prev >= 0) & (gs[p] == gs)
    has_q = (nxt < n) & (gs[q] == gs)
    x0, x1, f0, f1 = xs[p], xs[q], fs[p], fs[q]
    with np.errstate(invalid="ignore", divide="ignore"):
        # halved: differences of scores near the float64 limit do not overflow
        frac = (xs / 2 - x0 / 2) / (x1 / 2 - x0 / 2)
        inner = np.where(x1 > x0, f0 + frac * (f1 - f0), f0)
    inner = np.where(xs == x1, f1, np.where(xs == x0, f0, inner))
    value = np.where(has_p & has_q, inner, np.where(has_p, f0, np.where(has_q, f1, 0.0)))
    out = fitted.astype(np.float64)
    out[order[zs]] = value[zs]
    return out


def bound(v, default: float, n: int, size: int, dtype):
    """A clipping bound for the padded eager call: a scalar of ``dtype``, a per-point bound
    padded to ``size`` (its last value), or a tracer passed through."""
    if v is None:
        return np.asarray(default, dtype)
    if _shapes.is_traced(v):
        return v
    arr = np.asarray(v, dtype)
    if arr.ndim == 0:
        return arr
    arr = np.broadcast_to(arr, (n,))
    return _shapes.pad_axis(arr, size, arr[-1])
