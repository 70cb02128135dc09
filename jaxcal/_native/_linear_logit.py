"""The linear-logit kernel (``linear_logit_cpu.cc``): the exact constrained fit of the
parametric families (``jaxcal.fitting.solver``, without its sketch). :func:`linear_logit_cpu`
takes a problem's feature matrix and runs the same standardisation, damped Newton steps on
the faces of the constraints and active-set search as plain loops in double precision. The
pure-JAX solver is a program of nested while loops that XLA compiles in about half a second,
on the first fit of each family in a process; the program around this call compiles in a
tenth of that.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._native._loader import Kernel, require
from jaxcal._vma import varying_like

__all__ = ["KERNEL", "linear_logit_cpu"]

_LINEAR_LOGIT_TARGET = "jaxcal_linear_logit_cpu"


def _linear_logit_self_test() -> bool:
    """Platt scaling of four weighted points: labels (0, 1, 0, 1) at scores (-1, -1, 1, 1)
    give a positive slope and a zero gradient; labels (1, 1, 0, 0) violate the constraint
    ``slope >= 0``, whose optimum is then slope 0 and the logit of the weighted mean label
    1/3, log(1/2)."""
    s = np.array([-1.0, -1.0, 1.0, 1.0], np.float32)
    X = np.stack([s, np.ones(4, np.float32)], axis=1)
    w = np.array([1.0, 1.0, 1.0, 3.0], np.float32)
    C = np.array([[1.0, 0.0]], np.float32)
    scalars = (np.float32(0.0), np.float32(1e-9), np.int32(50))

    cpu = jax.devices("cpu")[0]
    fit = functools.partial(jit(linear_logit_cpu, static_argnames="intercept"), intercept=1)
    ok = True
    for t, expected in (([0, 1, 0, 1], None), ([1, 1, 0, 0], [0.0, np.log(0.5)])):
        t = np.asarray(t, np.float32)
        args = (jax.device_put(a, cpu) for a in (X, t, w, C, *scalars))
        theta, info = (np.asarray(v) for v in fit(*args))
        if expected is None:  # the unconstrained optimum: zero gradient
            z = X @ theta
            grad = X.T @ (w * (1 / (1 + np.exp(-z)) - t))
            ok &= bool(np.all(np.abs(grad) < 1e-4)) and theta[0] > 0 and info[0] == 0
        else:
            ok &= bool(np.allclose(theta, expected, atol=1e-5)) and info[4] == 1
    return ok


KERNEL = Kernel(
    name="linear_logit",
    targets=((_LINEAR_LOGIT_TARGET, "JaxcalLinearLogitCpu"),),
    self_test=_linear_logit_self_test,
    fallback="the pure-JAX solver (jaxcal.fitting.solver.solve)",
)


def linear_logit_cpu(X, t, w, C, l2, tol, max_iter, *, intercept: int | None):
    """The exact constrained fit of one linear-logit problem from the compiled CPU kernel
    (``jaxcal.fitting.solver.solve`` without the sketch; double precision inside).
    Traceable; CPU programs only.

    Args:
        X: ``[n, p]`` float32 or float64 features (``p <= 16``).
        t, w: ``[n]`` targets and weights, same dtype.
        C: ``[k, p]`` constraint rows (``k <= 8``), same dtype.
        l2, tol: scalars, same dtype; max_iter: int32 scalar.
        intercept: the intercept column, or ``None``.

    Returns:
        ``(theta, info)``: ``[p]`` coefficients and ``[4 + 2 k]`` ``(code, n_iter,
        objective, kkt_residual, active[k], multipliers[k])`` in ``X``'s dtype.

    Raises:
        RuntimeError: if the kernel is not available (see :func:`linear_logit_cpu_available`).
    """
    require(KERNEL)
    dtype = jnp.result_type(X)
    p, k = X.shape[-1], C.shape[0]
    out = (jax.ShapeDtypeStruct((p,), dtype), jax.ShapeDtypeStruct((4 + 2 * k,), dtype))
    call = jax.ffi.ffi_call(_LINEAR_LOGIT_TARGET, out, vmap_method="sequential")
    args = [jnp.asarray(a, dtype) for a in (X, t, w, C, l2, tol)]
    args.append(jnp.asarray(max_iter, jnp.int32))
    index = -1 if intercept is None else int(intercept)
    return varying_like(call(*args, intercept=np.int64(index)), *args)
