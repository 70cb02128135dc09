"""PRNG keys of the metrics whose randomness is optional (a resampled band or p-value, only
computed when asked: docs/api.md, "Randomness"), and keys as plain arrays for jitted
metrics: a typed key is passed as its raw data and its implementation's name (static), and
rebuilt inside the program, so that the program cache (``jaxcal._jit``), which keys on array
shapes and dtypes, can hold it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxcal._validation import check_key

__all__ = ["optional_key", "key_parts", "key_from_parts"]


def optional_key(key: Any, *, needed: bool, what: str, otherwise: str = "") -> Any:
    """``key`` checked (:func:`jaxcal._validation.check_key`), or ``None`` when none is
    given and ``needed`` is false; with ``needed`` and no key, a ``ValueError`` naming
    ``key`` that says ``what`` is random and, if given, the ``otherwise`` that is not.

    Example:
        >>> import jax
        >>> from jaxcal.metrics._keys import optional_key
        >>> optional_key(None, needed=False, what="the band resamples labels") is None
        True
        >>> optional_key(jax.random.key(0), needed=True, what="the band").shape
        ()
        >>> optional_key(None, needed=True, what="the band", otherwise="n_resamples=0")
        Traceback (most recent call last):
        ...
        ValueError: the band: pass key=jax.random.key(...), or n_resamples=0.
    """
    if key is None:
        if needed:
            alternative = f", or {otherwise}" if otherwise else ""
            raise ValueError(f"{what}: pass key=jax.random.key(...){alternative}.")
        return None
    return check_key(key)


def key_parts(key: jax.Array) -> tuple[jax.Array, str | None]:
    """``(data, impl)`` of a typed key (``impl`` is ``None`` for a legacy raw key)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key), str(jax.random.key_impl(key))
    return key, None


def key_from_parts(data: jax.Array, impl: str | None) -> jax.Array:
    """The key of :func:`key_parts`, inside a program."""
    return data if impl is None else jax.random.wrap_key_data(data, impl=impl)
