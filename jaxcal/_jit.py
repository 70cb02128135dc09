"""``jit`` for jaxcal's programs: ``jax.jit`` with compiler options chosen for short compiles.

jaxcal's programs are many small kernels (a Newton loop on a 3-parameter problem, a PAV
pass, binned sums), so on CPU most of a first call is XLA compiling them, kernel by kernel.
XLA's CPU backend emits each fused kernel through its MLIR fusion emitters by default;
its classic LLVM IR emitters produce kernels that run as fast for these programs (measured
on the linear-logit solver at n = 1e4 and 1e6) and compile 2-3x faster. So programs
compiled for CPU get ``xla_cpu_use_fusion_emitters=False``. The options are per program:
programs of the user's own are compiled as they would be without jaxcal.

The options are checked once, on a tiny program, and dropped if this jaxlib does not know
them; ``JAXCAL_XLA_DEFAULTS=1`` drops them too (XLA's defaults everywhere). Programs
compiled for other backends (GPU, TPU) get no options.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["jit", "cpu_compiler_options"]

_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def cpu_compiler_options() -> dict[str, Any] | None:
    """The options given to programs compiled for CPU (``None``: XLA's defaults)."""
    if os.environ.get("JAXCAL_XLA_DEFAULTS") == "1":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=_CPU_OPTIONS).lower(1.0).compile()
    except Exception:  # an unknown option in this jaxlib: keep XLA's defaults
        return None
    return dict(_CPU_OPTIONS)


class _Jit:
    """A jitted function whose compiler options are settled at its first use (so that
    importing jaxcal does not start a JAX backend)."""

    def __init__(self, fun: Callable, kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._kwargs = kwargs
        self._jitted: dict[Any, Any] = {}

    def _get(self, nested: bool = False) -> Any:
        # inside another trace the outer program is what gets compiled (and JAX refuses
        # options on a nested jit): the plain jitted function
        key = "nested" if nested else jax.default_backend() == "cpu"
        jitted = self._jitted.get(key)
        if jitted is None:
            options = cpu_compiler_options() if key is True else None
            jitted = jax.jit(self._fun, compiler_options=options, **self._kwargs)
            self._jitted[key] = jitted
        return jitted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        nested = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))
        return self._get(nested)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # lower, trace, eval_shape, _cache_size...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # usable as a method
        return self if obj is None else functools.partial(self, obj)


def jit(fun: Callable | None = None, **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` with jaxcal's CPU compiler options (module docstring).

    Usable as ``@jit``, ``@functools.partial(jit, static_argnames=...)`` or ``jit(f, ...)``.
    """
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _Jit(fun, kwargs)
