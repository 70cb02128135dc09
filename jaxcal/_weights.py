"""Weights rescaled by a power of two: the weighted fits whose result depends only on the
ratios of the weights (PAV and the calibrators built on it) divide them by
``2**floor(log2(max w))`` first, so that the largest lies in ``[1, 2)`` whatever the scale,
exactly, before products of weights can underflow or overflow."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["normalize_weights", "normalize_weights_host"]


def _int_dtype(dtype):
    return {8: jnp.int64, 4: jnp.int32, 2: jnp.int16}[jnp.dtype(dtype).itemsize]


def normalize_weights(w: jax.Array) -> jax.Array:
    """``w / 2**floor(log2(max w))`` along the last axis (each row one problem): the largest
    weight lies in ``[1, 2)``. Traceable.

    Integer operations on the IEEE-754 bits (XLA's CPU programs treat subnormal operands as
    zero, so a float ``max`` or product would lose subnormal weights): every weight is
    ``S * 2**X`` with an integer significand ``S``, scaled to ``S * 2**(X - E)`` by two exact
    products with normal powers of two. The result is exact; weights that fall below the
    smallest normal number (``2**-1022`` / ``2**-126`` of the largest) become 0. Weights
    must be non-negative (``-0.0`` is 0); a row of zeros stays zero.
    """
    dtype = w.dtype
    info = jnp.finfo(dtype)
    nmant, bias = int(info.nmant), int(info.maxexp) - 1
    idt = _int_dtype(dtype)
    one = jnp.array(1, idt)
    bits = jnp.maximum(lax.bitcast_convert_type(w, idt), 0)  # -0.0 -> +0.0
    field = bits >> nmant  # biased exponent, 0 for zero and subnormals
    mant = bits & ((one << nmant) - 1)
    sig = jnp.where(field > 0, mant | (one << nmant), mant)  # w = sig * 2**exp exactly
    exp = jnp.maximum(field, 1) - (bias + nmant)
    top = jnp.max(bits, axis=-1, keepdims=True)  # bits order like non-negative floats
    top_field = top >> nmant
    top_sig = jnp.where(top_field > 0, (top & ((one << nmant) - 1)) | (one << nmant), top)
    nbits = jnp.iinfo(idt).bits
    top_exp = jnp.maximum(top_field, 1) - (bias + nmant) + (nbits - lax.clz(top_sig)) - 1
    shift = exp - jnp.where(top > 0, top_exp, 0)  # <= 0 up to rounding of the largest
    # two factors 2**(shift // 2), 2**(shift - shift // 2), each a normal number
    shift = jnp.clip(shift, -2 * (bias - 1), 0)
    half = shift // 2

    def pow2(k):
        return lax.bitcast_convert_type(((k + bias) << nmant).astype(idt), dtype)

    scaled = sig.astype(dtype) * pow2(half) * pow2(shift - half)
    return jnp.where(scaled >= info.tiny, scaled, jnp.zeros((), dtype))


def normalize_weights_host(w: np.ndarray) -> np.ndarray:
    """:func:`normalize_weights` on the host (NumPy; one problem): ``w / 2**floor(log2(max
    w))``, before a cast to float32 can flush or overflow the weights. Exact for results in
    the normal range."""
    top = float(np.max(w)) if w.size else 0.0
    if not top > 0:
        return w
    e = int(np.frexp(top)[1]) - 1
    return w if e == 0 else np.ldexp(w, -e)
