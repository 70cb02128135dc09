"""The pure core of :mod:`jaxcal.calibrators.neural`: the monotone piecewise-linear score
map, the field network, the training objective and the jitted Adam loop.

Everything here is a pure function of arrays (jit / vmap friendly); validation, padding and
the estimator shell are in :mod:`jaxcal.calibrators.neural`.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.distributions import biject_to, constraints

# jaxcal.debias imports calibrators._base; importing it first keeps the import order acyclic.
from jaxcal._jit import jit
from jaxcal._scan import searchsorted

__all__ = [
    "MONOTONE",
    "SCORE_TYPES",
    "piecewise_linear",
    "field_mlp",
    "to_logit",
    "to_logit_host",
    "training_loss",
    "init_params",
    "quantile_knots",
    "train",
]

MONOTONE = ("penalty", "hard")
SCORE_TYPES = ("logit", "probability")


# --------------------------------------------------------------------------- pure core


def piecewise_linear(logits: jax.Array, knots: jax.Array, values: jax.Array) -> jax.Array:
    """Linear interpolation of ``values`` at ``knots``, constant beyond the end knots.

    A logit at a knot is interpolated from the segment on its left, so copies of the last
    knot appended as padding (``knots[K:] == knots[K - 1]``) are never reached: their
    values do not matter.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators.neural import piecewise_linear
        >>> knots, values = jnp.array([0.0, 1.0]), jnp.array([1.0, 3.0])
        >>> piecewise_linear(jnp.array([-5.0, 0.5, 9.0]), knots, values)
        Array([1., 2., 3.], dtype=float32)
    """
    knots, values = jnp.asarray(knots), jnp.asarray(values)
    lo = jnp.clip(logits, knots[0], knots[-1])
    k = jnp.clip(searchsorted(knots, lo, side="left") - 1, 0, knots.shape[0] - 2)
    a0, a1 = knots[k], knots[k + 1]
    frac = (lo - a0) / (a1 - a0)
    return values[k] + frac * (values[k + 1] - values[k])


def field_mlp(
    fields: jax.Array,
    embeddings: jax.Array,
    offsets: jax.Array,
    linear: jax.Array,
    weights: tuple[jax.Array, ...],
    biases: tuple[jax.Array, ...],
) -> jax.Array:
    """``g(x) = v . e(x) + MLP(e(x))``: embed, concatenate, linear skip + ReLU MLP -> ``[n]``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators.neural import field_mlp
        >>> emb = jnp.array([[1.0], [2.0], [3.0]])  # one field of 3 values, rank 1
        >>> field_mlp(jnp.array([[0], [2]]), emb, jnp.array([0]), jnp.array([0.5]),
        ...           (jnp.zeros((1, 1)),), ())  # no hidden layer: the linear term
        Array([0.5, 1.5], dtype=float32)
    """
    emb = embeddings[fields + offsets]  # [n, F, d]
    e = emb.reshape(emb.shape[0], -1)
    h = e
    for w, b in zip(weights[:-1], biases, strict=True):
        h = jax.nn.relu(h @ w + b)
    return e @ linear + (h @ weights[-1])[:, 0]


def to_logit(scores: jax.Array, score_type: str) -> jax.Array:
    if score_type == "logit":
        return scores
    tiny = jnp.finfo(jnp.result_type(scores, float)).eps
    p = jnp.clip(scores, tiny, 1 - tiny)
    return jnp.log(p) - jnp.log1p(-p)


def to_logit_host(scores: np.ndarray, score_type: str, dtype) -> np.ndarray:
    """:func:`to_logit` in NumPy, for the eager shell (no program per data size)."""
    s = np.asarray(scores, dtype)
    if score_type == "logit":
        return s
    tiny = np.finfo(dtype).eps
    p = np.clip(s, tiny, 1 - tiny)
    return np.log(p) - np.log1p(-p)


def _values(u: jax.Array, monotone: str) -> jax.Array:
    if monotone == "hard":
        return biject_to(constraints.ordered_vector)(u)
    return u


def _values_inverse(b: jax.Array, monotone: str) -> jax.Array:
    if monotone == "hard":
        return biject_to(constraints.ordered_vector).inv(b)
    return b


def _logit_q(params, logits, fields, knots, offsets, monotone):
    eta = piecewise_linear(logits, knots, _values(params["u"], monotone))
    if fields is None:
        return eta
    g = field_mlp(
        fields, params["emb"], offsets, params["linear"], params["weights"], params["biases"]
    )
    return eta + g


def training_loss(
    params, logits, fields, t, w, knots, offsets, penalty, l2, monotone, n_knots=None
):
    """The loss; ``n_knots``: how many of the knots are real (the others are padding)."""
    z = _logit_q(params, logits, fields, knots, offsets, monotone)
    data = jnp.sum(w * (jax.nn.softplus(z) - t * z)) / jnp.sum(w)
    b = _values(params["u"], monotone)
    drop = jax.nn.relu(b[:-1] - b[1:])
    if n_knots is not None:
        drop = jnp.where(jnp.arange(drop.shape[0]) < n_knots - 1, drop, 0.0)
    iso = penalty * jnp.sum(drop)
    net = [params["emb"], params["linear"], *params["weights"], *params["biases"]]
    reg = 0.5 * l2 * sum(jnp.sum(a**2) for a in net)
    return data + iso + reg


def init_params(knots, key, *, monotone, n_rows, n_fields, rank, hidden):
    """Initial parameters (see ``NeuralCalibration.init_params``) with ``n_rows`` rows of
    embeddings. Rows are drawn independently of how many there are (JAX's partitionable
    threefry), so padding rows leaves the real rows' draws unchanged."""
    dtype = knots.dtype
    u = _values_inverse(knots, monotone)
    k_emb, *k_layers = jax.random.split(key, len(hidden) + 2)
    emb = 0.1 * jax.random.normal(k_emb, (n_rows, rank), dtype)
    widths = [n_fields * rank, *hidden]
    weights, biases = [], []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        scale = float(np.sqrt(2.0 / max(fan_in, 1)))  # weak: keeps the knots' dtype
        weights.append(scale * jax.random.normal(k_layers[i], (fan_in, fan_out), dtype))
        biases.append(jnp.zeros(fan_out, dtype))
    weights.append(jnp.zeros((widths[-1], 1), dtype))
    linear = jnp.zeros(widths[0], dtype)
    return {
        "u": u,
        "emb": emb,
        "linear": linear,
        "weights": tuple(weights),
        "biases": tuple(biases),
    }


# XLA's default CPU emitters (``xla_defaults``): the training scan runs 1.5-2x slower with
# the classic emitters (n = 1e4, 1,000 steps), more than their shorter compile saves once
@partial(
    jit,
    xla_defaults=True,
    static_argnames=(
        "monotone",
        "n_steps",
        "batch_size",
        "use_fields",
        "n_rows",
        "rank",
        "hidden",
        "key_impl",
        "eps_root",
    ),
)
def train(
    logits,
    fields,
    t,
    w,
    n,
    knots,
    n_knots,
    offsets,
    penalty,
    l2,
    learning_rate,
    key,
    *,
    monotone: str,
    n_steps: int,
    batch_size: int | None,
    use_fields: bool,
    n_rows: int,
    rank: int,
    hidden: tuple[int, ...],
    key_impl: str | None,
    eps_root: float = 0.0,
):
    r"""Initialise and train. The data hold ``n`` real rows, then zero-weight padding (never
    drawn into a minibatch); ``knots`` the ``n_knots`` real knots, then copies of the last
    (no gradient reaches their values: see ``piecewise_linear`` and ``training_loss``).
    ``key`` is a key's raw data, of the PRNG ``key_impl`` (``None``: a raw legacy key).
    ``eps_root``: Adam's :math:`\epsilon` under the square root of the second moment (0 in
    the estimator; the pure fit takes the dtype's smallest normal number, which leaves
    every step's value unchanged but keeps the derivative of the square root finite where
    a gradient is exactly zero, so that ``jvp`` / ``grad`` through the loop are not NaN).
    Returns the parameters, the knot values ``b`` and the objective trace."""
    if key_impl is not None:
        key = jax.random.wrap_key_data(key, impl=key_impl)
    params = init_params(
        knots,
        jax.random.fold_in(key, 0),
        monotone=monotone,
        n_rows=n_rows,
        n_fields=offsets.shape[0],
        rank=rank,
        hidden=hidden,
    )
    key = jax.random.fold_in(key, 1)
    schedule = optax.cosine_decay_schedule(learning_rate, n_steps, alpha=1e-3)
    opt = optax.adam(schedule, eps_root=eps_root)

    def loss(p, idx):
        f = fields[idx] if use_fields else None
        return training_loss(
            p, logits[idx], f, t[idx], w[idx], knots, offsets, penalty, l2, monotone, n_knots
        )

    def step(carry, k):
        p, state = carry
        if batch_size is None:
            idx = jnp.arange(logits.shape[0])
        else:
            idx = jax.random.randint(jax.random.fold_in(key, k), (batch_size,), 0, n)
        value, grad = jax.value_and_grad(loss)(p, idx)
        updates, state = opt.update(grad, state, p)
        return (optax.apply_updates(p, updates), state), value

    (params, _), trace = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(n_steps))
    return params, _values(params["u"], monotone), trace


def quantile_knots(logits: jax.Array, weights: jax.Array, n_knots: int):
    """The knots of the estimator in JAX, for the pure fit: ``np.unique(np.quantile(
    logits[weights > 0], np.linspace(0, 1, n_knots)))`` (NumPy's linear interpolation,
    its rounding included), as ``([n_knots] knots, count)``: the ``count`` distinct knots
    first, then copies of the last (padding that ``piecewise_linear`` never reaches)."""
    dtype = logits.dtype
    keep = weights > 0
    ss = jnp.sort(jnp.where(keep, logits, jnp.inf))  # the kept logits first
    m = jnp.sum(keep.astype(jnp.int32))
    q = np.linspace(0.0, 1.0, n_knots)
    virtual = jnp.asarray(q, dtype) * (jnp.maximum(m, 1) - 1).astype(dtype)
    below = jnp.floor(virtual)
    gamma = (virtual - below).astype(dtype)
    i = below.astype(jnp.int32)
    a = ss[jnp.clip(i, 0, logits.shape[0] - 1)]
    b = ss[jnp.clip(jnp.minimum(i + 1, m - 1), 0, logits.shape[0] - 1)]
    diff = b - a
    quant = jnp.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    quant = jnp.where(gamma == 0, a, quant)
    new = jnp.concatenate([jnp.ones(1, bool), quant[1:] != quant[:-1]])
    at = jnp.cumsum(new.astype(jnp.int32)) - 1
    count = at[-1] + 1
    knots = jnp.zeros(n_knots, dtype).at[at].set(quant)
    knots = jnp.where(jnp.arange(n_knots) < count, knots, knots[count - 1])
    return knots, count
