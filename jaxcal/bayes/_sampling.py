"""The inference machinery shared by the Bayesian fits of :mod:`jaxcal.bayes` (over map
families) and :mod:`jaxcal.bayes.scoremodel` (over score models): NUTS chains over any
potential, model draws, the static configuration of a run, keys, and padding of the data.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.typing import ArrayLike
from numpyro.infer.hmc import hmc
from numpyro.infer.util import constrain_fn, potential_energy

from jaxcal import _shapes
from jaxcal.metrics._keys import key_from_parts, key_parts  # noqa: F401  (used through here)

__all__ = [
    "nuts_chains",
    "nuts_model_draws",
    "uniform_init",
    "map_problems",
    "padded_data",
    "is_minibatch",
]

METHODS = ("nuts", "svi")
GUIDES = ("mvn", "normal")
INIT_RADIUS = 2.0  # initial unconstrained values ~ Uniform(-2, 2), as numpyro's init_to_uniform


# ----------------------------------------------------------------------------- samplers


def map_problems(fn, xs):
    """``fn`` over the leading axis of ``xs``: a ``vmap`` on accelerators, a ``lax.map``
    (one after another) on CPU.

    NUTS builds its trees in ``while`` loops with data-dependent branches; under ``vmap``
    every branch becomes a select of both sides, run in lockstep until the slowest chain is
    done. On an accelerator the vectorised steps still win; on CPU the sequential map
    traces about 8x faster (Platt scaling: 5.4 s to 0.6 s) and sampled about 1.5x faster
    on 65,536 points (each chain does only its own work). The draws are the same up to
    float rounding.
    """
    if jax.default_backend() == "cpu":
        return jax.lax.map(lambda args: fn(*args), xs)
    return jax.vmap(fn)(*xs)


def nuts_chains(
    potential_fn,
    init_params,
    keys: jax.Array,
    *,
    num_warmup: int,
    num_samples: int,
    target_accept_prob: ArrayLike = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
):
    """Run ``C`` NUTS chains of one potential over keys (:func:`map_problems`; pure,
    jit/vmap-able).

    Args:
        potential_fn: unconstrained parameters (pytree) -> potential energy (negative log
            joint density, Jacobians included).
        init_params: initial unconstrained parameters with a leading chain axis ``[C, ...]``.
        keys: ``[C]`` PRNG keys.
        num_warmup: adaptation steps (discarded).
        num_samples: draws kept per chain.
        target_accept_prob: dual-averaging target (may be traced).
        max_tree_depth: NUTS maximum tree depth.
        dense_mass: adapt a dense (instead of diagonal) mass matrix.

    Returns:
        ``(z, stats)``: unconstrained draws (leaves ``[C, S, ...]``) and a dict of
        ``[C, S]`` arrays ``diverging``, ``num_steps``, ``accept_prob``.
    """

    def one(q0, key):
        init_kernel, sample_kernel = hmc(potential_fn=potential_fn, algo="NUTS")
        state = init_kernel(
            q0,
            num_warmup,
            target_accept_prob=target_accept_prob,
            max_tree_depth=max_tree_depth,
            dense_mass=dense_mass,
            rng_key=key,
        )

        # one scan over warm-up and sampling (the kernel is traced and compiled once)
        def step(s, _):
            s = sample_kernel(s)
            return s, (s.z, s.diverging, s.num_steps, s.accept_prob)

        _, out = jax.lax.scan(step, state, None, length=num_warmup + num_samples)
        z, div, steps, acc = jax.tree_util.tree_map(lambda x: x[num_warmup:], out)
        return z, {"diverging": div, "num_steps": steps, "accept_prob": acc}

    return map_problems(one, (init_params, keys))


def nuts_model_draws(
    model,
    args: tuple,
    kwargs: dict,
    init_params,
    key: jax.Array,
    cfg: tuple,
    tuning: dict,
    *,
    constrain_args: tuple | None = None,
    deterministic: bool = False,
):
    """:func:`nuts_chains` on a NumPyro model's potential, draws mapped to constrained space.

    Args:
        model, args, kwargs: the NumPyro model and its arguments (the potential is
            ``potential_energy(model, args, kwargs, .)``).
        init_params: initial unconstrained values, leaves ``[C, ...]`` (``C`` chains).
        key: PRNG key, split into one key per chain.
        cfg, tuning: the NUTS settings of :func:`nuts_config` (``cfg`` static, ``tuning``
            traced).
        constrain_args: model arguments for the constraining pass (default ``args``; e.g.
            ``(None,)`` so that the data likelihood is not re-evaluated per draw).
        deterministic: also return the model's deterministic sites.

    Returns:
        ``(draws, stats)``: dict of constrained sites (leaves ``[C, S, ...]``) and the
        sampler statistics of :func:`nuts_chains`.
    """
    num_chains, num_warmup, num_samples, max_tree_depth, dense_mass = cfg
    pot = functools.partial(potential_energy, model, args, kwargs)
    z, stats = nuts_chains(
        pot,
        init_params,
        jax.random.split(key, num_chains),
        num_warmup=num_warmup,
        num_samples=num_samples,
        target_accept_prob=tuning["target_accept_prob"],
        max_tree_depth=max_tree_depth,
        dense_mass=dense_mass,
    )
    c_args = args if constrain_args is None else constrain_args
    constrain = functools.partial(
        constrain_fn, model, c_args, kwargs, return_deterministic=deterministic
    )
    return jax.vmap(jax.vmap(constrain))(z), stats


def uniform_init(key: jax.Array, shapes: dict, num_chains: int, dtype) -> dict:
    """Initial unconstrained values of ``num_chains`` chains, ``Uniform(-INIT_RADIUS,
    INIT_RADIUS)`` per coordinate (NumPyro's ``init_to_uniform``): leaves
    ``[num_chains, *shapes[name]]``, one key of ``jax.random.split(key, len(shapes))`` per
    site, in the order of ``shapes``."""
    keys = jax.random.split(key, len(shapes))
    return {
        name: jax.random.uniform(k, (num_chains, *shape), dtype, -INIT_RADIUS, INIT_RADIUS)
        for k, (name, shape) in zip(keys, shapes.items(), strict=True)
    }


def positive_int(value, name, minimum=1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def run_config(
    method,
    n,
    *,
    num_samples,
    num_warmup,
    num_chains,
    target_accept_prob,
    max_tree_depth,
    dense_mass,
    num_steps,
    learning_rate,
    subsample_size,
    guide,
):
    """Validated settings: ``(cfg, tuning)``, the static tuple that fixes the program and
    the dict of its traced numbers (``target_accept_prob`` / ``learning_rate``).

    NUTS: those of :func:`nuts_config`; SVI: ``cfg = (num_steps, num_samples,
    subsample_size, guide)``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
    num_samples = positive_int(num_samples, "num_samples")
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    if method == "nuts":
        if subsample_size is not None:
            raise ValueError("subsample_size is for method='svi' (NUTS needs the full data).")
        return nuts_config(
            num_chains=num_chains,
            num_warmup=num_warmup,
            num_samples=num_samples,
            target_accept_prob=target_accept_prob,
            max_tree_depth=max_tree_depth,
            dense_mass=dense_mass,
        )
    if guide not in GUIDES:
        raise ValueError(f"guide must be one of {GUIDES}; got {guide!r}.")
    if not float(learning_rate) > 0:
        raise ValueError(f"learning_rate must be > 0; got {learning_rate!r}.")
    if subsample_size is not None:
        subsample_size = positive_int(subsample_size, "subsample_size")
        if subsample_size > n:
            raise ValueError(f"subsample_size ({subsample_size}) exceeds the data size ({n}).")
        if subsample_size == n:
            subsample_size = None
    cfg = (positive_int(num_steps, "num_steps"), num_samples, subsample_size, guide)
    return cfg, {"learning_rate": np.asarray(learning_rate, dtype)}


def nuts_config(
    *, num_chains, num_warmup, num_samples, target_accept_prob, max_tree_depth, dense_mass
) -> tuple[tuple, dict]:
    """Validated NUTS settings ``(cfg, tuning)``: ``cfg = (num_chains, num_warmup,
    num_samples, max_tree_depth, dense_mass)`` (static) and ``tuning =
    {"target_accept_prob": ...}`` (traced)."""
    if not 0.0 < float(target_accept_prob) < 1.0:
        raise ValueError(f"target_accept_prob must be in (0, 1); got {target_accept_prob!r}.")
    cfg = (
        positive_int(num_chains, "num_chains"),
        positive_int(num_warmup, "num_warmup", 0),
        positive_int(num_samples, "num_samples"),
        positive_int(max_tree_depth, "max_tree_depth"),
        bool(dense_mass),
    )
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    return cfg, {"target_accept_prob": np.asarray(target_accept_prob, dtype)}


def is_minibatch(method: str, cfg: tuple) -> bool:
    """Whether the settings of :func:`run_config` ask for minibatch SVI (``subsample_size``)."""
    return method == "svi" and cfg[2] is not None


def padded_data(arrays, fills, *, axis=0, exact=False):
    """The problem's arrays padded along ``axis`` to their bucket size (shape policy), as
    NumPy arrays of the default float dtype.

    Every array is padded with its ``fills`` entry; the caller chooses fills that add
    nothing (a weight of 0). ``exact`` keeps the size (minibatch SVI, whose minibatches are
    drawn from all rows).
    """
    n = arrays[0].shape[axis]
    size = n if exact else _shapes.padded_size(n, total=arrays[0].size)
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    return [
        np.asarray(_shapes.pad_axis(a, size, f, axis=axis), dtype)
        for a, f in zip(arrays, fills, strict=True)
    ]
