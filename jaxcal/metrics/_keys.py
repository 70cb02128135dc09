"""PRNG keys as plain arrays for jitted metrics: a typed key is passed as its raw data and
its implementation's name (static), and rebuilt inside the program, so that the program
cache (``jaxcal._jit``), which keys on array shapes and dtypes, can hold it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["key_parts", "key_from_parts"]


def key_parts(key: jax.Array) -> tuple[jax.Array, str | None]:
    """``(data, impl)`` of a typed key (``impl`` is ``None`` for a legacy raw key)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key), str(jax.random.key_impl(key))
    return key, None


def key_from_parts(data: jax.Array, impl: str | None) -> jax.Array:
    """The key of :func:`key_parts`, inside a program."""
    return data if impl is None else jax.random.wrap_key_data(data, impl=impl)
