"""NumPy randomness from a JAX PRNG key, for the host-side functions that take ``key``
(the data simulators and splitters of :mod:`jaxcal.data`): one key convention for the
whole library, one documented way to turn it into a :class:`numpy.random.Generator`."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxcal._validation import check_key

__all__ = ["numpy_rng"]


def numpy_rng(key: Any, *, name: str = "key") -> np.random.Generator:
    """A NumPy generator seeded by a JAX PRNG key (validated by
    :func:`jaxcal._validation.check_key`).

    The key's raw data (``jax.random.key_data``: two ``uint32`` words for the default
    threefry keys) read as one unsigned integer, first word most significant, seeds
    :func:`numpy.random.default_rng`. Distinct keys give distinct seeds, the same key the
    same draws, and a key made by ``jax.random.key(s)`` or ``jax.random.PRNGKey(s)`` with
    ``0 <= s < 2**32`` has data ``[0, s]``, i.e. the integer ``s``: its generator is
    ``np.random.default_rng(s)``, so draws made from an integer seed ``s`` are reproduced
    by the key ``jax.random.key(s)``.

    Args:
        key: a concrete JAX PRNG key (typed or legacy raw).
        name: the argument's name, for the error message.

    Returns:
        A fresh :class:`numpy.random.Generator` (PCG64).

    Raises:
        ValueError: ``key`` is not a single JAX PRNG key, or is traced (the functions that
            take it run on the host, outside ``jit``).

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal._rng import numpy_rng
        >>> a = numpy_rng(jax.random.key(7)).permutation(5)
        >>> b = np.random.default_rng(7).permutation(5)
        >>> bool((a == b).all())
        True
    """
    import jax

    key = check_key(key, name=name)
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    try:
        words = np.asarray(jax.random.key_data(key) if typed else key).astype(np.uint32).ravel()
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError) as exc:
        raise ValueError(
            f"{name} must be a concrete JAX PRNG key: this function draws on the host with "
            "NumPy, so call it outside jit / vmap."
        ) from exc
    seed = 0
    for word in words.tolist():
        seed = (seed << 32) | int(word)
    return np.random.default_rng(seed)
