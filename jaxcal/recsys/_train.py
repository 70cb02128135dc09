"""The shared estimator shell and training loop of the ranking models.

Every model is a frozen dataclass of hyperparameters (the thin shell). Its numerical core
is one pure function ``model._fit_core(aux, hp, key, max_rank) -> fitted`` where

* ``aux`` is a pytree of device arrays prepared (and validated) once from the training data;
* ``hp`` is a dict of *array-valued* hyperparameters (``learning_rate``, ``l2``, ``rank``,
  ...), so that ``fit`` does not recompile when they change and ``sweep`` can ``vmap`` over
  them;
* ``key`` is a PRNG key; ``max_rank`` (static) is the width of the factor arrays. A model of
  rank ``d < max_rank`` keeps its factor columns ``d..max_rank-1`` at exactly zero (they
  are initialised to zero and receive zero gradients), which is how sweeps pad ranks.

Gradient-trained models implement four small pure pieces (``_init``, ``_batch``, ``_loss``,
``_finish``, optionally ``_project``) and share ``train_loop``: ``lax.scan`` over
``n_steps`` steps, each drawing its mini-batch on device from ``fold_in(key, step)``,
taking the gradient of the mini-batch loss and applying an optax update.

The per-interaction arrays in ``aux`` are padded to the bucket size of the number of
positives (``jaxcal._shapes``; see ``SamplerTables``, ``build_graph`` and WR-MF's pairs), so a
new number of interactions inside a bucket reuses the compiled fit; the samplers draw below
the traced count of positives, so padding does not change the sampled stream.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxcal._jit import jit
from jaxcal._validation import check_int, check_key, check_real
from jaxcal.data.triples import Interactions
from jaxcal.metrics._keys import key_from_parts, key_parts
from jaxcal.recsys._data import as_interactions

__all__ = [
    "Ranker",
    "GradientRanker",
    "train_loop",
    "sparse_sgd_loop",
    "make_optimizer",
    "init_factors",
    "check_key",
    "check_indices",
]

OPTIMIZERS = ("sgd", "adam", "adagrad")


def make_optimizer(name: str, learning_rate: ArrayLike) -> optax.GradientTransformation:
    """An optax optimizer by name; ``learning_rate`` may be a traced scalar (sweeps)."""
    if name == "sgd":
        return optax.sgd(learning_rate)
    if name == "adam":
        return optax.adam(learning_rate)
    if name == "adagrad":
        return optax.adagrad(learning_rate)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {name!r}.")


def init_factors(key: jax.Array, n_rows: int, max_rank: int, scale: float, rank: ArrayLike):
    """``[n_rows, max_rank]`` N(0, scale^2) factors; columns ``>= rank`` are zero.

    Column ``c`` is drawn from ``fold_in(key, c)``, so the first ``d`` columns do not depend
    on ``max_rank``: a model padded to a wider sweep starts from the same factors.
    """
    cols = jax.vmap(lambda c: jax.random.normal(jax.random.fold_in(key, c), (n_rows,)))(
        jnp.arange(max_rank)
    )
    mask = jnp.arange(max_rank) < rank
    return jnp.where(mask[None, :], scale * cols.T, 0.0)


def train_loop(
    loss_fn: Callable[[Any, Any], jax.Array],
    sample_fn: Callable[[jax.Array], Any],
    params: Any,
    *,
    key: jax.Array,
    n_steps: int,
    optimizer: optax.GradientTransformation,
    project: Callable[[Any], Any] | None = None,
) -> tuple[Any, jax.Array]:
    """Run ``n_steps`` optimizer steps under ``lax.scan``; returns ``(params, losses)``.

    Args:
        loss_fn: ``loss_fn(params, batch) -> scalar`` mini-batch loss.
        sample_fn: ``sample_fn(key) -> batch``, drawn on device each step.
        params: initial parameters (a pytree).
        key: PRNG key; step ``t`` uses ``fold_in(key, t)``.
        n_steps: number of steps (static).
        optimizer: an optax transformation.
        project: optional projection applied after every update (e.g. CML's norm clipping).

    Returns:
        The final parameters and the ``[n_steps]`` mini-batch losses.
    """
    grad_fn = jax.value_and_grad(loss_fn)

    def step(carry, t):
        params, state = carry
        batch = sample_fn(jax.random.fold_in(key, t))
        loss, grads = grad_fn(params, batch)
        updates, state = optimizer.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        if project is not None:
            params = project(params)
        return (params, state), loss

    (params, _), losses = jax.lax.scan(step, (params, optimizer.init(params)), jnp.arange(n_steps))
    return params, losses


def sparse_sgd_loop(
    row_loss_fn: Callable[[Any, Any], jax.Array],
    sample_fn: Callable[[jax.Array], Any],
    gather_fn: Callable[[Any, Any], Any],
    scatter_add_fn: Callable[[Any, Any, Any], Any],
    params: Any,
    *,
    key: jax.Array,
    n_steps: int,
    learning_rate: ArrayLike,
    project: Callable[[Any], Any] | None = None,
) -> tuple[Any, jax.Array]:
    r"""Plain SGD for losses that touch only gathered rows, updating those rows in place.

    When the mini-batch loss is :math:`L(\Theta) = R(G_b(\Theta))` with :math:`G_b` a gather
    of the rows the batch uses, :math:`\nabla L = G_b^\top \nabla R` is a scatter-add, and
    the SGD step :math:`\Theta - \eta \nabla L` is ``scatter_add(Theta, -eta * grad R)``:
    what ``train_loop`` with ``optax.sgd`` computes (duplicated rows sum their gradients in
    both), without materialising the dense gradient and touching every parameter each step
    (:math:`O(B d)` instead of :math:`O((n_u + n_i) d)` per step; LearnBPR's update).

    Args:
        row_loss_fn: ``row_loss_fn(rows, batch) -> scalar`` on the gathered rows.
        sample_fn: ``sample_fn(key) -> batch``.
        gather_fn: ``gather_fn(params, batch) -> rows``.
        scatter_add_fn: ``scatter_add_fn(params, batch, row_updates) -> params``.
        params: initial parameters.
        key: PRNG key; step ``t`` uses ``fold_in(key, t)`` (as in ``train_loop``).
        n_steps: number of steps (static).
        learning_rate: SGD step size (may be traced).
        project: optional projection applied after every update.

    Returns:
        The final parameters and the ``[n_steps]`` mini-batch losses.
    """
    grad_fn = jax.value_and_grad(row_loss_fn)

    def step(params, t):
        batch = sample_fn(jax.random.fold_in(key, t))
        loss, grads = grad_fn(gather_fn(params, batch), batch)
        updates = jax.tree_util.tree_map(lambda g: -learning_rate * g, grads)
        params = scatter_add_fn(params, batch, updates)
        if project is not None:
            params = project(params)
        return params, loss

    return jax.lax.scan(step, params, jnp.arange(n_steps))


def check_host_ids(users, items, n_users: int, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Concrete ids validated on the host (no device op of the caller's shape), broadcast
    together.

    Raises:
        ValueError: non-integer ids, ids outside ``[0, n)``, or shapes that do not broadcast.
    """
    out = []
    for name, ids, n in (("users", users, n_users), ("items", items, n_items)):
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{name} must be integer ids; got dtype {arr.dtype}.")
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise ValueError(f"{name} ids must lie in [0, {n}); got [{arr.min()}, {arr.max()}].")
        out.append(arr)
    try:
        u, i = np.broadcast_arrays(*out)
    except ValueError as exc:
        raise ValueError(
            f"users {out[0].shape} and items {out[1].shape} do not broadcast."
        ) from exc
    return u, i


def check_indices(users: ArrayLike, items: ArrayLike, n_users: int, n_items: int):
    """Validate concrete user / item ids for ``predict``; tracers pass through (inside jit)."""
    out = []
    for name, ids, n in (("users", users, n_users), ("items", items, n_items)):
        if isinstance(ids, jax.core.Tracer):
            out.append(ids)
            continue
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{name} must be integer ids; got dtype {arr.dtype}.")
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise ValueError(
                f"{name} ids must lie in [0, {n}); got range [{arr.min()}, {arr.max()}]."
            )
        out.append(jnp.asarray(arr))
    try:
        np.broadcast_shapes(jnp.shape(out[0]), jnp.shape(out[1]))
    except ValueError as exc:
        raise ValueError(
            f"users {jnp.shape(out[0])} and items {jnp.shape(out[1])} do not broadcast."
        ) from exc
    return out[0], out[1]


def _positive_grid(value: Any, name: str) -> np.ndarray:
    """``value`` as a 1-D float array of finite numbers > 0 (a number or a sequence: a grid
    of penalties), else ValueError."""
    arr = np.atleast_1d(np.asarray(value, dtype=float))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a positive number or a non-empty 1-D sequence.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0; got {value!r}.")
    return arr


def check_fraction(value: Any, name: str) -> float:
    """``value`` as a float in ``(0, 1)`` (a share of the data), else a ValueError naming
    ``name``."""
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if not (ok and 0 < value < 1):
        raise ValueError(f"{name} must lie in (0, 1); got {value!r}.")
    return float(value)


def _check_settings(obj: Any, *, ints=(), positive=(), non_negative=()) -> None:
    """The named hyperparameters of ``obj`` checked: ``ints`` integers >= 1, ``positive``
    finite numbers > 0, ``non_negative`` finite numbers >= 0 (ValueError naming the first
    bad one)."""
    for name in ints:
        check_int(getattr(obj, name), name)
    for name in positive:
        check_real(getattr(obj, name), name, minimum=0.0, strict=True)
    for name in non_negative:
        check_real(getattr(obj, name), name, minimum=0.0)


class Ranker:
    """Mixin for the ranking estimators (subclasses are frozen dataclasses).

    Subclasses set ``ARRAY_HPARAMS`` (the names passed to the core as arrays, which
    ``sweep`` can vary together with ``replicate`` and ``rank``) and implement ``_validate``,
    ``_prepare`` and ``_fit_core``. The hyperparameters are checked when the estimator is
    built (``__post_init__``).
    """

    ARRAY_HPARAMS: tuple[str, ...] = ()
    SWEEP_RANK: bool = True  # whether ``rank`` can be swept by padding

    def __post_init__(self) -> None:
        self._validate()

    # -- validation and preparation (eager, NumPy) --------------------------------------
    def _validate(self) -> None:  # pragma: no cover - overridden
        """Check the hyperparameters; raise ValueError naming the bad one."""

    def _prepare(self, data: Interactions, **fit_kwargs: Any) -> Any:  # pragma: no cover
        """Validate fit-time inputs and build the device arrays ``aux`` for the core."""
        raise NotImplementedError

    def _fit_core(self, aux: Any, hp: dict, key: jax.Array, max_rank: int) -> Any:
        raise NotImplementedError  # pragma: no cover

    # -- shared plumbing ------------------------------------------------------------------
    def _hp(self, **overrides: Any) -> dict[str, np.ndarray]:
        """Array-valued hyperparameters (defaults from the estimator, then overrides), as
        NumPy scalars: traced arguments of the compiled fit, converted without a program."""
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        hp = {name: np.asarray(float(getattr(self, name)), dtype) for name in self.ARRAY_HPARAMS}
        hp["rank"] = np.asarray(int(getattr(self, "rank", 1)), np.int32)
        for name, value in overrides.items():
            hp[name] = np.asarray(value, dtype=hp[name].dtype)
        return hp

    def _static(self) -> Ranker:
        """This estimator with its array hyperparameters blanked: the static jit argument,
        so that changing ``learning_rate`` or ``l2`` does not recompile (a copy, not a new
        estimator: ``None`` would not pass the constructor's checks)."""
        static = copy.copy(self)
        for name in self.ARRAY_HPARAMS:
            object.__setattr__(static, name, None)
        return static

    def _data_and_aux(self, train, n_users, n_items, fit_kwargs):
        data = as_interactions(train, n_users=n_users, n_items=n_items)
        return data, self._prepare(data, **fit_kwargs)

    def _fit(self, train: Any, *, key: jax.Array, n_users=None, n_items=None, **fit_kwargs):
        """The fit shared by the estimators' ``fit`` (documented there)."""
        key = check_key(key)
        _, aux = self._data_and_aux(train, n_users, n_items, fit_kwargs)
        max_rank = int(getattr(self, "rank", 1))
        key_data, impl = key_parts(key)
        return _fit_jit(self._static(), aux, self._hp(), key_data, max_rank, impl)


def fit_doc(returns: str, example: str, more_args: str = "") -> str:
    """The docstring of a ranking model's ``fit``: the shared arguments (``more_args``:
    lines of further ones), what it returns and an example (lines already indented)."""
    return f"""Fit on positive interactions (the model of the class docstring).

        Args:
            train: a ``[n_users, n_items]`` matrix whose non-zero entries are positive
                interactions, a ``(users, items[, values])`` tuple, a
                ``jaxcal.data.Interactions`` (zero ratings are not positives), or an
                object with ``users`` / ``items`` attributes.
            key: JAX PRNG key (initialisation and on-device sampling).
            n_users: number of users (pairs input only; default ``max(users) + 1``).
            n_items: number of items (pairs input only; default ``max(items) + 1``).
{more_args}
        Returns:
            {returns}

        Raises:
            ValueError: on an invalid key or invalid training data.

        Example:
{example}
        """


def _fit_core(model: Ranker, aux: Any, hp: dict, key: jax.Array, max_rank: int) -> Any:
    return model._fit_core(aux, hp, key, max_rank)


@partial(jit, static_argnames=("model", "max_rank", "impl"))
def _fit_jit(model, aux, hp, key_data, max_rank, impl):
    return _fit_core(model, aux, hp, key_from_parts(key_data, impl), max_rank)


class GradientRanker(Ranker):
    """Models trained by mini-batch gradient steps with the shared ``train_loop``.

    Subclasses implement ``_init(key, aux, hp, max_rank) -> params``,
    ``_batch(key, aux) -> batch``, ``_loss(params, batch, aux, hp) -> scalar`` and
    ``_finish(params, aux, hp, losses) -> fitted``, and may override ``_project``.

    Models whose loss only reads gathered rows set ``SPARSE_SGD = True`` and implement
    ``_gather(params, batch)``, ``_scatter_add(params, batch, rows)`` and
    ``_row_loss(rows, batch, aux, hp)``; with ``optimizer="sgd"`` they train with
    ``sparse_sgd_loop`` (same updates, no dense gradient).
    """

    ARRAY_HPARAMS = ("learning_rate", "l2")
    SPARSE_SGD: bool = False

    def _validate_common(self) -> None:
        _check_settings(
            self,
            ints=("rank", "n_steps", "batch_size"),
            positive=("learning_rate", "init_scale"),
            non_negative=("l2",),
        )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {self.optimizer!r}.")

    def _validate(self) -> None:
        self._validate_common()

    def _project(self, params: Any, hp: dict) -> Any:
        return params

    def _fit_core(self, aux: Any, hp: dict, key: jax.Array, max_rank: int) -> Any:
        k_init, k_train = jax.random.split(key)
        params = self._init(k_init, aux, hp, max_rank)
        if self.SPARSE_SGD and self.optimizer == "sgd":
            params, losses = sparse_sgd_loop(
                lambda rows, b: self._row_loss(rows, b, aux, hp),
                lambda k: self._batch(k, aux),
                self._gather,
                self._scatter_add,
                params,
                key=k_train,
                n_steps=self.n_steps,
                learning_rate=hp["learning_rate"],
                project=lambda p: self._project(p, hp),
            )
            return self._finish(params, aux, hp, losses)
        params, losses = train_loop(
            lambda p, b: self._loss(p, b, aux, hp),
            lambda k: self._batch(k, aux),
            params,
            key=k_train,
            n_steps=self.n_steps,
            optimizer=make_optimizer(self.optimizer, hp["learning_rate"]),
            project=lambda p: self._project(p, hp),
        )
        return self._finish(params, aux, hp, losses)
