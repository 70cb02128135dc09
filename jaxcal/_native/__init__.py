"""jaxcal's optional compiled CPU kernel: weighted PAV as an XLA FFI handler.

The portable PAV (``jaxcal.calibrators._pav``) is a vectorised merge tree in pure JAX that
runs under ``jit`` and ``vmap`` on every backend. On a CPU, XLA's comparator sort and the
merge tree's many small loop steps make it slower than scikit-learn's sequential Cython
loop, so for XLA's *CPU* backend jaxcal also builds (at install, from ``pav_cpu.cc``) the
sequential algorithm as an XLA FFI custom call: a radix sort by (group, score), tie
pooling and stack PAV. It is not a host callback: XLA calls it inside the compiled program,
so it works under ``jit`` and ``vmap`` (every leading batch index is one problem), and
``jax.lax.platform_dependent`` picks it only when the program is compiled for CPU (GPU and
TPU programs use the merge tree).

The kernel is used when the shared library was built (a C++17 compiler at install time;
the build is optional) and passes a small self-test against a known answer when first
loaded. ``JAXCAL_NATIVE=0`` in the environment turns it off (the pure-JAX path is then
used on CPU too). The library keeps its work buffers per thread between calls (about 60
bytes per point of the largest problem seen), so that repeated calls do not pay page faults.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["pav_cpu_available", "pav_fitted_cpu", "ENV"]

ENV = "JAXCAL_NATIVE"
_TARGET = "jaxcal_pav_cpu"


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for pattern in ("_pav_cpu*.so", "_pav_cpu*.pyd", "_pav_cpu*.dylib"):
        found = sorted(here.glob(pattern))
        if found:
            return found[0]
    return None


@functools.cache
def _register() -> bool:
    """Load the shared library and register its handler with XLA's CPU backend."""
    path = _library_path()
    if path is None:
        return False
    try:
        library = ctypes.cdll.LoadLibrary(str(path))
        jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(library.JaxcalPavCpu), "cpu")
    except Exception:  # not loadable here (another platform's build, a broken file)
        return False
    return True


@functools.cache
def _load() -> bool:
    """Registered and passing the self-test (a library built against an incompatible XLA
    fails when it first runs)."""
    if not _register():
        return False
    try:
        return _self_test()
    except Exception:
        return False


def _self_test() -> bool:
    """One tiny problem with a tie, a violation and two groups, against its known answer."""
    x = np.array([0.0, 1.0, 1.0, 2.0, 0.0, 1.0], np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.0, 2.0, 1.0], np.float32)
    g = np.array([0, 0, 0, 0, 1, 1], np.int32)
    cpu = jax.devices("cpu")[0]
    args = (jax.device_put(a, cpu) for a in (x, y, np.ones_like(y), g))
    fitted = jax.jit(pav_fitted_cpu)(*args)
    return bool(np.allclose(np.asarray(fitted), [0.5, 0.5, 0.5, 0.5, 1.5, 1.5]))


def pav_cpu_available() -> bool:
    """Whether the compiled CPU kernel is built, loads, passes its self-test and is not
    turned off by ``JAXCAL_NATIVE=0``."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return _load()


def pav_fitted_cpu(
    x: jax.Array, y: jax.Array, w: jax.Array, group: jax.Array | None = None
) -> jax.Array:
    """Fitted values of the weighted isotonic (non-decreasing) regression of ``y`` on ``x``
    per group, from the compiled CPU kernel. Traceable; CPU programs only.

    Args:
        x: ``[..., n]`` float32 or float64 scores; each leading index is one problem.
        y: ``[..., n]`` targets, same dtype.
        w: ``[..., n]`` non-negative weights, same dtype.
        group: optional ``[..., n]`` int32 / int64 group ids (PAV never pools across them).

    Returns:
        ``[..., n]`` fitted values (block means; 0 for a group whose weights are all zero).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`pav_cpu_available`).
    """
    if not _register():
        raise RuntimeError(
            "jaxcal's compiled CPU kernel is not available (not built at install, or built "
            "against an incompatible jaxlib); use jaxcal.calibrators._pav.pav instead."
        )
    has_group = group is not None
    if not has_group:
        group = jnp.zeros((*x.shape[:-1], 1), jnp.int32)
    elif group.dtype not in (jnp.int32, jnp.int64):
        group = group.astype(jnp.int32)
    call = jax.ffi.ffi_call(
        _TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="broadcast_all"
    )
    return call(x, y.astype(x.dtype), w.astype(x.dtype), group, has_group=has_group)
