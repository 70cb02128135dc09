r"""Scores that JAX's working precision can hold: the exact transform every calibrator applies
on the host, in float64, before its scores are cast to the working dtype (float32 unless x64
is enabled), and again at ``predict``.

Validation sees float64 scores; the fit computes in the working dtype. Scores beyond its
range (``1e300`` in float32) would become ``inf``, scores far from 1 overflow or underflow
the squares and sums of a parametric fit (float32 ``s**2`` at ``s = 1e20``), and scores
whose spread is small against their magnitude (``s + 1e8``) round to a handful of ties. So
the training scores are mapped to

.. math::  s' = s \cdot 2^{-k} - c,

with an integer ``k`` and a shift ``c`` (in units of :math:`2^k`) chosen from the scores of
positive weight (:func:`fit_scaling`):

* ``k = 0`` while :math:`\max|s|` lies in :math:`[2^{-L}, 2^{L})`, else
  :math:`\max|s'| \in [1, 2)`. ``L`` is an eighth of the dtype's exponent range for maps that
  do arithmetic on the score (the parametric families, neural calibration: :math:`2^{\pm 16}`
  in float32, :math:`2^{\pm 128}` in float64) and half of it for maps that only compare and
  interpolate scores (the knot and bin maps: :math:`2^{\pm 64}`, :math:`2^{\pm 512}`).
  Multiplying by a power of two is exact, so the order, ties and ratios of the scores are
  kept bit for bit. The knot and bin maps take ``k`` from the median of :math:`|s|` instead
  (``k = 0`` while it lies in the same range), so that a few outlying scores (one score of
  ``1e300`` among scores near 1) are clipped to the dtype's largest finite value, keeping
  their order with the rest, rather than every other score flushed to zero.
* ``c = 0``, unless the cast would merge distinct scores, the calibrator's map is
  shift-equivariant, and the scores lie on one side of zero within a factor 1.5 of each other.
  Then ``c`` is the smallest score (rounded to the working dtype, in units of
  :math:`2^k`) and ``k`` follows from the spread. The subtraction is exact (Sterbenz's
  lemma: :math:`x - y` is exact for :math:`y/2 \le x \le 2y`), so again no information is
  lost before the cast.

For ordinary scores the transform is the identity (``k = 0``, ``c = 0``) and nothing
changes. The fitted calibrator stores ``(c, k)`` as a :class:`ScoreScaling` (a pytree:
traced under ``jit``, saved by ``jaxcal.save``) and its coefficients, knots and edges refer
to :math:`s'`. At ``predict`` the same transform is applied in float64 on the host and the
result clipped to the dtype's finite range, so scores far outside the training range (even
``1e300``) get the map's limiting values, never NaN. Traced scores (inside a caller's
``jit``) are transformed in their own dtype by exact powers of two.

After the transform, the cast may still merge scores (scores spanning many orders of
magnitude, or maps that are not shift-equivariant). That is counted with one sort: more than
``TIE_WARN_FRACTION`` of the distinct scores merged gives a
:class:`~jaxcal._validation.PrecisionWarning`, and scores that the cast makes all equal
raise ``ValueError`` where a map needs two distinct scores.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcal._fitdata import fit_dtype, maybe_check_scores, working_dtype  # noqa: F401 (re-exported)
from jaxcal._pytree import pytree_dataclass
from jaxcal._shapes import is_traced
from jaxcal._validation import distinct_sorted, warn_precision_loss
from jaxcal._vma import varying_like

__all__ = [
    "ScoreScaling",
    "fit_dtype",
    "identity_scaling",
    "pure_identity_scaling",
    "fit_scaling",
    "working_dtype",
    "ARITHMETIC",
    "ORDER",
]

#: ``L`` as a fraction of the dtype's largest exponent, for maps that compute with the score
ARITHMETIC = 8
#: ... for maps that only compare and interpolate scores (knots, bins)
ORDER = 2
#: the scores are shifted only if they lie within this factor of each other (Sterbenz)
_SHIFT_RATIO = 1.5


@pytree_dataclass
class ScoreScaling:
    """The exact transform :math:`s' = s\\,2^{-k} - c` of a fitted calibrator's scores.

    Attributes:
        shift: ``[...]`` :math:`c`, in the dtype of the fitted calibrator (the working dtype
            of its fit, :func:`fit_dtype`; exactly the value subtracted).
        exponent: ``[...]`` :math:`k` (int32).

    Example:
        >>> import numpy as np
        >>> from jaxcal.calibrators._scaling import ScoreScaling
        >>> scaling = ScoreScaling(shift=np.float32(1.0), exponent=np.int32(2))
        >>> scaling.apply(np.array([4.0, 8.0]))  # s / 2**2 - 1
        array([0., 1.], dtype=float32)
    """

    shift: jax.Array
    exponent: jax.Array

    def is_identity(self) -> bool:
        """Whether the transform is the identity (``False`` for traced leaves)."""
        if id(self) in _IDENTITY_IDS:
            return True
        if is_traced(self):
            return False
        return not (np.any(np.asarray(self.shift)) or np.any(np.asarray(self.exponent)))

    def apply(self, scores: Any, *, batch_ndim: int = 0) -> Any:
        """:math:`s'` of validated ``scores``. Concrete scores: computed in float64 on the host,
        clipped to the finite range of the dtype of ``shift`` (the fitted calibrator's) and
        cast to it (for the identity: returned unchanged, clipped to that range if they
        exceed it). Traced scores: in their dtype, by exact powers of two. A batched
        transform (leaves ``[B...]``, ``batch_ndim`` dimensions) takes scores ``[B..., m...]``."""
        if is_traced(scores, self):
            s = jnp.asarray(scores)
            if not jnp.issubdtype(s.dtype, jnp.floating):
                s = s.astype(jnp.result_type(float))
            c, k = (
                _expand(jnp.asarray(a), batch_ndim, s.ndim) for a in (self.shift, self.exponent)
            )
            c = c.astype(s.dtype)
            # the identity passes the scores through a cond untouched: the map's operations
            # then compile (and round) as they do on concrete scores
            identity = jnp.all(c == 0) & jnp.all(k == 0)
            s = varying_like(s, c, k)  # inside shard_map: both branches vary as the map does
            return lax.cond(identity, lambda x: x, lambda x: _ldexp_traced(x, -k) - c, s)
        scores = maybe_check_scores(scores)
        dtype = getattr(self.shift, "dtype", None)
        dtype = np.result_type(self.shift) if dtype is None else np.dtype(dtype)
        if dtype.kind != "f":  # not a float (a shift stored as an integer)
            dtype = working_dtype()
        if self.is_identity():  # the scores as they are, their dtype kept, but finite
            return _clip_finite(scores, dtype)
        s = np.asarray(scores, np.float64)
        c = _expand(np.asarray(self.shift, np.float64), batch_ndim, s.ndim)
        k = _expand(np.asarray(self.exponent, np.int64), batch_ndim, s.ndim)
        return _to_working(s, c, k, dtype)


def _expand(x, batch_ndim: int, ndim: int):
    return x.reshape(x.shape + (1,) * (ndim - batch_ndim))


def identity_scaling(batch_shape: tuple[int, ...] = (), dtype: Any = None) -> ScoreScaling:
    """The identity transform (``c = 0``, ``k = 0``) in ``dtype`` (default: the working
    dtype).

    Example:
        >>> from jaxcal.calibrators._scaling import identity_scaling
        >>> identity_scaling().is_identity()
        True
    """
    dtype = working_dtype() if dtype is None else np.dtype(dtype)
    return _identity(tuple(batch_shape), dtype.name)


def pure_identity_scaling(dtype) -> ScoreScaling:
    """The identity transform as JAX arrays (``c = 0`` in ``dtype``, ``k = 0``), made inside
    the caller's trace: the scaling of the pure fits, which do no host work (their scores
    are used as they are, in their own dtype).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators._scaling import pure_identity_scaling
        >>> pure_identity_scaling(jnp.float32).shift.dtype
        dtype('float32')
    """
    return ScoreScaling(shift=jnp.zeros((), dtype), exponent=jnp.zeros((), jnp.int32))


_IDENTITY_IDS: set[int] = set()  # ids of the cached identities below, never freed


@functools.cache
def _identity(batch_shape: tuple[int, ...], dtype: str) -> ScoreScaling:
    # shared by the fits it serves: its leaves are immutable arrays
    leaves = (np.zeros(batch_shape, dtype), np.zeros(batch_shape, np.int32))
    shift, exponent = jax.device_put(leaves)
    out = ScoreScaling(shift=shift, exponent=exponent)
    _IDENTITY_IDS.add(id(out))
    return out


def _cast(s: np.ndarray, dtype) -> np.ndarray:
    """``s`` in ``dtype`` (itself if it is already), clipped to its finite range."""
    if s.dtype == dtype:
        return s
    with np.errstate(over="ignore"):
        out = s.astype(dtype)
    if not np.isfinite(np.sum(out)):  # overflow (one pass; NaN / inf propagate)
        fmax = np.finfo(dtype).max
        out = np.clip(s, -fmax, fmax).astype(dtype)
    return out


def _clip_finite(scores: Any, dtype) -> Any:
    """Validated ``scores`` clipped to ``dtype``'s finite range if they exceed it (float64
    scores of 1e300 would become ``inf`` in float32), else unchanged."""
    arr = np.asarray(scores)
    fmax = np.finfo(dtype).max
    if arr.dtype.kind == "f" and arr.dtype.itemsize > np.dtype(dtype).itemsize:
        if arr.size and np.abs(arr).max() > fmax:
            return np.clip(arr, -fmax, fmax)
    return scores


def _to_working(s: np.ndarray, c, k, dtype) -> np.ndarray:
    """``s * 2**-k - c`` in float64, clipped to ``dtype``'s finite range, cast to ``dtype``."""
    with np.errstate(over="ignore", under="ignore"):
        t = np.ldexp(s, -k) - c
    fmax = np.finfo(dtype).max
    return np.clip(t, -fmax, fmax).astype(dtype)


def _pow2(m: jax.Array, dtype) -> jax.Array:
    """:math:`2^m` for integer ``m`` in the normal range of ``dtype``, exactly (bit pattern)."""
    info = jnp.finfo(dtype)
    bias = info.maxexp - 1
    itype = jnp.int32 if np.dtype(dtype).itemsize == 4 else jnp.int64
    m = jnp.clip(m, 1 - bias, bias).astype(itype)
    return lax.bitcast_convert_type((m + bias) << info.nmant, dtype)


def _ldexp_traced(x: jax.Array, k: jax.Array) -> jax.Array:
    """``x * 2**k`` in ``x``'s dtype: three exact power-of-two factors (so any ``k`` that
    does not overflow or underflow the result is exact)."""
    lim = jnp.finfo(x.dtype).maxexp - 2
    k = jnp.clip(k, -3 * lim, 3 * lim)
    for _ in range(3):
        step = jnp.clip(k, -lim, lim)
        x = x * _pow2(step, x.dtype)
        k = k - step
    return x


def _exponent(m: np.ndarray, limit: int) -> np.ndarray:
    """``k`` per row: 0 for ``m`` in ``[2**-limit, 2**limit)`` (and for ``m = 0``), else the
    ``k`` with ``m * 2**-k`` in ``[1, 2)``."""
    k = np.frexp(m)[1].astype(np.int64) - 1
    keep = (m == 0) | ((k >= -limit) & (k < limit))
    return np.where(keep, 0, k)


def fit_scaling(
    scores: np.ndarray,
    weights: np.ndarray,
    *,
    shift: bool,
    scale: bool = True,
    kind: int = ARITHMETIC,
    need_spread: bool = False,
    what: str,
    dtype: Any = None,
) -> tuple[ScoreScaling, np.ndarray]:
    """The transform of validated float64 training scores (``[n]``, or ``[B, n]`` problems
    with one transform each) and the transformed scores, as float64 arrays holding
    working-dtype values (exactly what the device will see).

    Args:
        scores, weights: validated float64 arrays; entries of zero weight do not count.
        shift: whether the calibrator's map is shift-equivariant (``c`` may be nonzero).
        scale: whether it is scale-equivariant (``k`` may be nonzero); if not, scores beyond
            the working dtype's range raise ``ValueError``.
        kind: :data:`ARITHMETIC` or :data:`ORDER` (the range kept as is, module docstring).
        need_spread: raise ``ValueError`` if the cast makes all scores of a problem equal.
        what: the calibrator's name, for messages.
        dtype: the working dtype of the fit (default JAX's default float; a calibrator
            whose fitted leaves follow its scores' dtype passes :func:`fit_dtype`).

    Warns:
        PrecisionWarning: the cast merged more than ``TIE_WARN_FRACTION`` of the distinct
            scores of a problem.
    """
    batched = scores.ndim == 2
    s = scores if batched else scores[None]
    pos = (weights if batched else weights[None]) > 0
    dtype = working_dtype() if dtype is None else np.dtype(dtype)
    limit = np.finfo(dtype).maxexp // kind
    allpos = bool(pos.all())
    with np.errstate(invalid="ignore"):
        m = (np.abs(s) if allpos else np.where(pos, np.abs(s), 0.0)).max(axis=1)
    k = _exponent(m, limit) if scale else np.zeros(m.shape, np.int64)
    if kind == ORDER and k.any():  # the bulk decides: outliers may clip, not the bulk flush
        for b in np.flatnonzero(k):
            a = np.abs(s[b][pos[b]])
            k[b] = _exponent(np.median(a[a > 0]), limit)
    c = np.zeros(m.shape)
    if not scale and dtype != np.float64 and np.any(m > np.finfo(dtype).max):
        b = int(np.argmax(m))
        raise ValueError(
            f"{what}: {'problem ' + str(b) + ': ' if batched else ''}scores reach "
            f"{m[b]:.6g}, beyond the range of {dtype.name} (JAX's working precision, "
            f"|s| <= {np.finfo(dtype).max:.4g}), and this calibrator cannot rescale them (its "
            "map depends on the scale of the scores). Rescale the scores or enable float64 "
            "(jax.config.update('jax_enable_x64', True))."
        )
    if k.any():
        work = _to_working(s, c[:, None], k[:, None], dtype)
    else:
        work = _cast(s, dtype)
    if dtype != np.float64:
        work, k, c = _merge_check(
            s, pos, allpos, work, k, c, dtype, shift, limit, need_spread, what
        )
    if k.any() or c.any():
        leaves = (c.astype(dtype), k.astype(np.int32))
        if not batched:
            leaves = tuple(np.asarray(a[0]) for a in leaves)
        shift_, exponent = jax.device_put(leaves)
        scaling = ScoreScaling(shift=shift_, exponent=exponent)
    else:
        scaling = identity_scaling(m.shape if batched else (), dtype)
    out = work.astype(np.float64, copy=False)
    return scaling, out if batched else out[0]


def _merge_check(s, pos, allpos, work, k, c, dtype, shift, limit, need_spread, what):
    """Count the distinct scores the cast merges (one sort, skipped when the cast is exact),
    shift the problems where that helps and is exact, warn / raise on what remains."""
    with np.errstate(over="ignore", under="ignore"):
        same = work == (np.ldexp(s, -k[:, None]) if k.any() else s)
    exact = np.all(same if allpos else same | ~pos, axis=1)
    if exact.all():
        return work, k, c
    rows = np.flatnonzero(~exact)
    srt = np.sort(np.where(pos[rows], s[rows], np.nan), axis=1)  # NaN (weight 0) last
    n64 = distinct_sorted(srt)
    lo, hi = srt[:, 0], np.nanmax(srt, axis=1)
    n32 = distinct_sorted(_sorted_working(srt, c[rows], k[rows], dtype))
    if shift:
        narrow = ((lo > 0) & (hi <= _SHIFT_RATIO * lo)) | ((hi < 0) & (lo >= _SHIFT_RATIO * hi))
        redo = (n32 < n64) & narrow
        if redo.any():
            r = rows[redo]
            k[r] = _exponent(hi[redo] - lo[redo], limit)
            c[r] = np.ldexp(lo[redo], -k[r]).astype(dtype)  # within 2^-24 of lo: exact (Sterbenz)
            work[r] = _to_working(s[r], c[r, None], k[r, None], dtype)
            n32[redo] = distinct_sorted(_sorted_working(srt[redo], c[r], k[r], dtype))
    if need_spread:
        flat = np.flatnonzero((n32 == 1) & (n64 > 1))
        if flat.size:
            j = flat[0]
            where = f"problem {rows[j]}: " if s.shape[0] > 1 else ""
            raise ValueError(
                f"{what}: {where}all training scores are equal after rounding to {dtype.name} "
                f"(JAX's working precision): their float64 values span [{lo[j]:.17g}, "
                f"{hi[j]:.17g}], less than the dtype's spacing at that magnitude, and a "
                "calibration map of the score needs two distinct scores. Enable float64 "
                "(jax.config.update('jax_enable_x64', True)) or subtract a typical score first."
            )
    warn_precision_loss(n64, n32, dtype, what=what, stacklevel=5)
    return work, k, c


def _sorted_working(srt: np.ndarray, c: np.ndarray, k: np.ndarray, dtype) -> np.ndarray:
    """The working values of sorted rows (the transform is non-decreasing: still sorted),
    NaN kept."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        t = np.ldexp(srt, -k[:, None]) - c[:, None]
    fmax = np.finfo(dtype).max
    return np.clip(t, -fmax, fmax).astype(dtype)
