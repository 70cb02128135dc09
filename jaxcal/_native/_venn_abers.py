"""The Venn-Abers kernel (``venn_abers_cpu.cc``): the Venn-Abers tables
(``jaxcal.calibrators._venn_abers_core``). :func:`va_tables_cpu` runs the cumulative sum
diagrams, the hull pointers and the bridge sweeps of every problem as plain loops, where
the pure-JAX version's data-dependent inner ``while_loop`` s pay XLA's loop runtime per
point. Same comparisons and arithmetic in the same order and precision: the same tables.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._native._loader import Kernel, require
from jaxcal._vma import varying_like

__all__ = ["KERNEL", "va_tables_cpu"]

_VENN_ABERS_TARGET = "jaxcal_venn_abers_cpu"


def _venn_abers_self_test() -> bool:
    """Two problems (three runs, then two with another test weight) against their known
    tables (computed by the pure-JAX path)."""
    inc_w = np.array([0, 1, 2, 1, 0, 1, 3], np.float32)
    inc_y = np.array([0, 1, 0, 1, 0, 0, 2], np.float32)
    omega = np.array([1, 1, 1, 1, 1.5, 1.5, 1.5], np.float32)
    first = np.array([1, 0, 0, 0, 1, 0, 0], bool)
    last = np.array([0, 0, 0, 1, 0, 0, 1], bool)
    p0 = [0.0, 0.25, 0.25, 0.5, 0.0, 0.0, 4 / 9]
    p1 = [0.5, 0.5, 1.0, 1.0, 0.6, 7 / 9, 1.0]

    cpu = jax.devices("cpu")[0]
    args = (jax.device_put(a, cpu) for a in (inc_w, inc_y, omega, first, last))
    got0, got1 = jit(va_tables_cpu)(*args)
    return np.allclose(got0, p0, atol=1e-6) and np.allclose(got1, p1, atol=1e-6)


KERNEL = Kernel(
    name="venn_abers",
    targets=((_VENN_ABERS_TARGET, "JaxcalVennAbersCpu"),),
    self_test=_venn_abers_self_test,
    fallback="the pure-JAX tables (jaxcal.calibrators._venn_abers_core)",
)


def va_tables_cpu(inc_w, inc_y, omega, first, last) -> tuple[jax.Array, jax.Array]:
    """``(p0, p1)`` of the Venn-Abers tables at every point of a flat layout of problems
    (``jaxcal.calibrators._venn_abers_core.va_tables``), from the compiled CPU kernel.
    Traceable; CPU programs only.

    Args:
        inc_w, inc_y: ``[..., N]`` float32 or float64 CSD increments (0 at every problem's
            first point).
        omega: ``[..., N]`` the test point's weight at every point, same dtype.
        first, last: ``[..., N]`` bool: a problem's first / last point; each layout starts
            with a first and ends with a last point.

    Raises:
        RuntimeError: if the kernel is not available (see :func:`venn_abers_cpu_available`).
    """
    require(KERNEL)
    dtype = jnp.result_type(inc_w)
    row = jax.ShapeDtypeStruct(jnp.shape(inc_w), dtype)
    call = jax.ffi.ffi_call(_VENN_ABERS_TARGET, (row, row), vmap_method="broadcast_all")
    args = (inc_w, jnp.asarray(inc_y, dtype), jnp.asarray(omega, dtype))
    args += tuple(jnp.asarray(v, bool) for v in (first, last))
    return varying_like(call(*args), *args)
