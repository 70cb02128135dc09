r"""Train K ranking models in one compiled program: ``vmap`` over hyperparameters and keys.

``sweep(model, train, *, key, grid)`` expands ``grid`` (a dict of lists) into the Cartesian
product of K configurations and trains all K with one ``jit(vmap(fit_core))``:

* array-valued hyperparameters (``learning_rate``, ``l2``, and model-specific ones such as
  CML's ``margin`` or WR-MF's ``alpha``) are batched arguments of the compiled program;
* ``replicate`` (an integer index) selects the PRNG key ``jax.random.fold_in(key,
  replicate)`` of a configuration (without ``replicate`` in the grid every configuration
  uses ``key``), so configuration ``k`` equals ``dataclasses.replace(model,
  **config_k).fit(train, key=fold_in(key, replicate_k))``;
* ``rank`` is swept by *padding*: every model gets ``max(ranks)`` factor columns, and a
  model of rank ``d`` keeps columns ``d..`` at exactly zero (zero initialisation, zero
  gradients: the scores, losses and optimizer states are those of a rank-``d`` model).
  Column ``c`` of the initial factors is drawn from ``fold_in(key, c)``, so a padded model
  starts, and ends, where the unpadded one does. The cost is that of ``max(ranks)``.

With ``devices=`` the K axis is sharded over a 1-D ``Mesh`` (``NamedSharding``, axis
``"models"``); K is padded to a multiple of the device count with copies of the last
configuration, which are dropped from the result.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.recsys._train import Ranker, _fit_core, check_key, key_from_parts, key_parts

__all__ = ["sweep", "SweepResult"]


@pytree_dataclass
class SweepResult:
    """K fitted models stacked along a leading axis, with their configurations.

    Attributes:
        models: one fitted model pytree whose leaves have a leading ``K`` axis.
        hparams: ``{name: [K] array}`` for every swept name (``replicate`` and ``rank``
            included when swept).
        names: the swept names, in grid order.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import BPRMF, sweep
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> result = sweep(BPRMF(rank=4, n_steps=20), train, key=jax.random.key(0),
        ...                grid={"replicate": [0, 1]})
        >>> result.configs
        [{'replicate': 0}, {'replicate': 1}]
        >>> result.predict_all().shape  # [K, n_users, n_items]
        (2, 30, 40)
    """

    models: Any
    hparams: dict
    names: tuple = static_field(default=())

    def __len__(self) -> int:
        return int(np.shape(self.hparams[self.names[0]])[0])

    @property
    def configs(self) -> list[dict[str, float | int]]:
        """The K configurations as dicts (Python scalars)."""
        cols = {n: np.asarray(self.hparams[n]).tolist() for n in self.names}
        return [{n: cols[n][k] for n in self.names} for k in range(len(self))]

    def select(self, k: int) -> Any:
        """The ``k``-th fitted model (an ordinary fitted model; its ``rank``-padded factor
        columns are zero).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.recsys import WRMF, sweep
            >>> pairs = np.eye(6, 8, dtype=bool) | np.eye(6, 8, k=3, dtype=bool)
            >>> ranks = sweep(WRMF(n_steps=2), pairs, key=jax.random.key(0), grid={"rank": [2, 4]})
            >>> bool(np.asarray(ranks.select(0).user_factors)[:, 2:].any())  # rank 2 of 4
            False
        """
        if not 0 <= k < len(self):
            raise ValueError(f"k must lie in [0, {len(self)}); got {k}.")
        return jax.tree_util.tree_map(lambda leaf: leaf[k], self.models)

    def predict(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        """``[K, ...]`` scores of ``(users, items)`` under every model.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.recsys import WRMF, sweep
            >>> counts = np.random.default_rng(0).poisson(0.5, (10, 12))
            >>> penalties = {"l2": [0.1, 1.0, 10.0]}
            >>> result = sweep(WRMF(rank=3, n_steps=2), counts, key=jax.random.key(5),
            ...                grid=penalties)
            >>> result.predict(np.array([0, 1]), np.array([3, 4])).shape
            (3, 2)
        """
        first = self.select(0)
        u, i = jnp.asarray(users), jnp.asarray(items)
        first.predict(u, i)  # validates ids and shapes eagerly
        return jax.vmap(lambda m: m.predict(u, i))(self.models)

    def predict_all(self) -> jax.Array:
        """``[K, n_users, n_items]`` scores of all pairs under every model.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.recsys import CML, sweep
            >>> users, items = np.arange(9) % 3, np.arange(9) % 5
            >>> result = sweep(CML(rank=2, n_steps=5), (users, items), key=jax.random.key(0),
            ...                grid={"margin": [0.1, 1.0]})
            >>> result.predict_all().shape  # [K, n_users, n_items]
            (2, 3, 5)
        """
        return jax.vmap(lambda m: m.predict_all())(self.models)


def _grid_values(name: str, values: Any) -> list:
    if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
        values = [values]
    values = list(np.asarray(values).reshape(-1).tolist())
    if not values:
        raise ValueError(f"grid[{name!r}] is empty; give at least one value.")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
            raise ValueError(f"grid[{name!r}] must hold finite numbers; got {v!r}.")
        if name in ("replicate", "rank") and (not float(v).is_integer() or v < (name == "rank")):
            bound = ">= 1" if name == "rank" else ">= 0"
            raise ValueError(f"grid[{name!r}] must hold integers {bound}; got {v!r}.")
    return values


def _expand_grid(model: Ranker, grid: dict) -> tuple[list[str], list[tuple]]:
    if not isinstance(grid, dict) or not grid:
        raise ValueError("grid must be a non-empty dict such as {'learning_rate': [0.01, 0.1]}.")
    allowed = (*model.ARRAY_HPARAMS, "replicate") + (("rank",) if model.SWEEP_RANK else ())
    for name in grid:
        if name not in allowed:
            raise ValueError(
                f"{type(model).__name__} cannot sweep {name!r}; sweepable: {sorted(allowed)}."
            )
    names = list(grid)
    columns = [_grid_values(n, grid[n]) for n in names]
    return names, list(itertools.product(*columns))


@partial(jit, static_argnames=("model", "max_rank", "impl"))
def _sweep_core(model: Ranker, aux: Any, hp: dict, key_data: jax.Array, max_rank: int, impl):
    keys = key_from_parts(key_data, impl)
    return jax.vmap(lambda h, k: _fit_core(model, aux, h, k, max_rank))(hp, keys)


def sweep(
    model: Ranker,
    train: Any,
    *,
    key: jax.Array,
    grid: dict[str, Sequence[float]],
    n_users: int | None = None,
    n_items: int | None = None,
    devices: Sequence[jax.Device] | None = None,
    **fit_kwargs: Any,
) -> SweepResult:
    """Train one model per configuration of ``grid`` in a single ``vmap``-ed program.

    Args:
        model: an estimator (``BPRMF``, ``UBPR``, ``NCF``, ``CML``, ``LightGCN``, ``WRMF``);
            its fields give the values of hyperparameters not in ``grid``.
        train: training interactions (as for ``fit``).
        key: JAX PRNG key; configuration ``k`` uses ``fold_in(key, replicate_k)`` when
            ``replicate`` is in the grid, else ``key``.
        grid: ``{name: [values]}``; names among the model's array hyperparameters
            (``learning_rate``, ``l2``, ...), ``replicate`` (integers >= 0: the index folded
            into ``key``) and (factor models) ``rank``. The Cartesian product is trained, in
            ``itertools.product`` order.
        n_users: number of users (pairs input only).
        n_items: number of items (pairs input only).
        devices: optional devices to shard the K models over (``NamedSharding``).
        **fit_kwargs: model-specific data, as for ``fit`` (e.g. UBPR's ``propensity``).

    Returns:
        A ``SweepResult`` with the K fitted models stacked along a leading axis.

    Raises:
        ValueError: on an unknown or non-sweepable name, empty or non-numeric values,
            invalid hyperparameter values, or invalid training data.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import BPRMF, sweep
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> result = sweep(BPRMF(rank=8, n_steps=100), train, key=jax.random.key(0),
        ...                grid={"learning_rate": [0.01, 0.05], "replicate": [0, 1]})
        >>> len(result), result.predict(np.array([0]), np.array([1])).shape
        (4, (4, 1))
    """
    if not isinstance(model, Ranker):
        raise ValueError(
            f"sweep needs a trainable ranking model (BPRMF, UBPR, NCF, CML, LightGCN, WRMF); "
            f"got {type(model).__name__}."
        )
    key = check_key(key)
    names, configs = _expand_grid(model, grid)
    # validate every configuration's hyperparameters eagerly, through the estimator
    for config in configs:
        changes = {n: v for n, v in zip(names, config, strict=True) if n != "replicate"}
        if "rank" in changes:
            changes["rank"] = int(changes["rank"])
        dataclasses.replace(model, **changes)
    _, aux = model._data_and_aux(train, n_users, n_items, fit_kwargs)

    k_total = len(configs)
    columns = {n: [c[idx] for c in configs] for idx, n in enumerate(names)}
    ranks = [int(d) for d in columns.get("rank", [getattr(model, "rank", 1)])]
    max_rank = max(ranks)
    hp = model._hp()
    hp = {n: np.broadcast_to(v, (k_total,)) for n, v in hp.items()}
    for n in names:
        if n != "replicate":
            hp[n] = np.asarray(columns[n], dtype=hp[n].dtype)
    if "replicate" in columns:
        keys = jnp.stack([jax.random.fold_in(key, int(s)) for s in columns["replicate"]])
    else:
        keys = jnp.stack([key] * k_total)

    if devices is not None:
        devices = list(devices)
        if not devices:
            raise ValueError("devices is empty; pass None to run on the default device.")
        n_dev = len(devices)
        pad = (-k_total) % n_dev
        if pad:
            hp = {n: np.concatenate([v, np.repeat(v[-1:], pad)]) for n, v in hp.items()}
            keys = jnp.concatenate([keys, jnp.repeat(keys[-1:], pad, axis=0)])
        mesh = Mesh(np.asarray(devices), ("models",))
        batched = NamedSharding(mesh, PartitionSpec("models"))
        hp = jax.device_put(hp, batched)
        keys = jax.device_put(keys, batched)
        aux = jax.device_put(aux, NamedSharding(mesh, PartitionSpec()))
    key_data, impl = key_parts(keys)
    models = _sweep_core(model._static(), aux, hp, key_data, max_rank, impl)
    if devices is not None and pad:
        models = jax.tree_util.tree_map(lambda leaf: leaf[:k_total], models)
    hparams = {n: np.asarray(columns[n]) for n in names}
    if "replicate" in hparams or "rank" in hparams:
        for n in ("replicate", "rank"):
            if n in hparams:
                hparams[n] = hparams[n].astype(np.int64)
    return SweepResult(models, hparams, names=tuple(names))
