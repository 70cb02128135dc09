"""The ENIR kernel (``enir_cpu.cc``): ENIR's near-isotonic path and BIC average
(``jaxcal.calibrators.enir``), whose pure-JAX version runs one merge per
``lax.while_loop`` iteration. :func:`enir_fit_cpu` returns the averaged run values,
:func:`near_isotonic_cpu` the path's fit at one lambda; ``ENIR.fit`` and
``near_isotonic_regression`` call them when the default backend is a CPU. The kernel keeps
its own work buffers between calls (about 180 bytes per run, up to 2**21 runs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._native._loader import Kernel, require
from jaxcal._vma import varying_like

__all__ = ["KERNEL", "enir_fit_cpu", "near_isotonic_cpu"]

_ENIR_TARGET = "jaxcal_enir_cpu"
_NEAR_ISOTONIC_TARGET = "jaxcal_near_isotonic_cpu"


def _enir_self_test() -> bool:
    """Six runs and two padding runs, three breakpoint models, against the known average
    (computed by the pure-JAX path)."""
    w = np.array([1.0, 2.0, 1.0, 1.0, 3.0, 1.0, 0.0, 0.0], np.float32)
    y = np.array([0.2, 0.9, 0.1, 0.6, 0.3, 1.0, 0.0, 0.0], np.float32)
    real = np.arange(8) < 6
    expected = [0.2, 0.6358582, 0.4199914, 0.4270731, 0.4270731, 1.0, 0.0, 0.0]

    cpu = jax.devices("cpu")[0]
    args = [w, y, w * y, w * (1 - y), real, np.float32(9.0), np.float32(1e-3)]
    acc, n_models, n_scored, _ = jit(enir_fit_cpu)(*(jax.device_put(a, cpu) for a in args))
    ok = np.allclose(np.asarray(acc), expected, rtol=0, atol=1e-5)
    return ok and int(n_models) == 3 and int(n_scored) == 3


KERNEL = Kernel(
    name="enir",
    targets=((_ENIR_TARGET, "JaxcalEnirCpu"), (_NEAR_ISOTONIC_TARGET, "JaxcalNearIsotonicCpu")),
    self_test=_enir_self_test,
    fallback="jaxcal.calibrators.enir's pure-JAX path",
)


def enir_fit_cpu(w, y, s1, s0, real, n_eff, eps):
    """ENIR's BIC-averaged near-isotonic fit of tie-pooled runs, from the compiled CPU
    kernel (``jaxcal.calibrators.enir``; double precision inside). Traceable; CPU programs
    only.

    Args:
        w: ``[..., N]`` float32 or float64 run weights (positive for the real runs); each
            leading index is one problem.
        y: ``[..., N]`` run mean targets, same dtype.
        s1: ``[..., N]`` positive weights of the runs (``sum w clip(t, 0, 1)``), same dtype.
        s0: ``[..., N]`` negative weights (``sum w (1 - clip(t, 0, 1))``), same dtype.
        real: ``[..., N]`` bool, true for the real runs, which come first (the rest pads).
        n_eff: ``[...]`` number of points (the ``N`` of ``K log N`` in the BIC).
        eps: ``[...]`` clipping of the fitted values inside the likelihood.

    Returns:
        ``(acc, n_models, n_scored, lam)``: the averaged value of each run (``[..., N]``, 0
        for padding), the number of breakpoint models and how many were scored exactly
        (``[...]`` int32), and the lambda of the path's last merge (``[...]``).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`enir_cpu_available`).
    """
    require(KERNEL)
    dtype = y.dtype
    batch = y.shape[:-1]
    row = jax.ShapeDtypeStruct(y.shape, dtype)
    count = jax.ShapeDtypeStruct(batch, jnp.int32)
    call = jax.ffi.ffi_call(
        _ENIR_TARGET,
        (row, count, count, jax.ShapeDtypeStruct(batch, dtype)),
        vmap_method="broadcast_all",
    )
    args = (
        *(jnp.asarray(a, dtype) for a in (w, y, s1, s0)),
        jnp.asarray(real, bool),
        *(jnp.broadcast_to(jnp.asarray(a, dtype), batch) for a in (n_eff, eps)),
    )
    return varying_like(call(*args), *args)


def near_isotonic_cpu(w, y, real, lam):
    """The near-isotonic fit of runs at penalty ``lam`` (``inf``: the isotonic fit), from
    the compiled CPU kernel's path. Traceable; CPU programs only.

    Args:
        w: ``[..., N]`` float32 or float64 positive weights (any value for padding).
        y: ``[..., N]`` values in sequence order, same dtype.
        real: ``[..., N]`` bool, true for the real entries, which come first.
        lam: ``[...]`` penalty ``>= 0``.

    Returns:
        ``[..., N]`` fitted values (padding takes the last real group's value).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`enir_cpu_available`).
    """
    require(KERNEL)
    dtype = y.dtype
    call = jax.ffi.ffi_call(
        _NEAR_ISOTONIC_TARGET, jax.ShapeDtypeStruct(y.shape, dtype), vmap_method="broadcast_all"
    )
    args = (
        jnp.asarray(w, dtype),
        y,
        jnp.asarray(real, bool),
        jnp.broadcast_to(jnp.asarray(lam, dtype), y.shape[:-1]),
    )
    return varying_like(call(*args), *args)
