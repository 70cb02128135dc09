r"""Monotone matrix completion (MMC-c): a low-rank matrix seen through an unknown monotone link.

Ganti, Balzano and Willett (NeurIPS 2015, "Matrix Completion Under Monotonic Single Index
Models") model the observed entries of an ``m x n`` matrix as :math:`X_{ui} = g(Z_{ui})`
(plus noise), with :math:`Z` of rank :math:`r` and :math:`g` non-decreasing but unknown.
MMC-c alternates a projected gradient step on :math:`Z` with an isotonic fit of :math:`g`:

.. math::
    Z_0 = P_r\big(c\, P_\Omega(X)\big), \qquad
    Z_t = P_r\big(Z_{t-1} - \eta\, c\, P_\Omega(\hat g_{t-1}(Z_{t-1}) - X)\big), \qquad
    \hat g_t = \operatorname*{arg\,min}_{g \uparrow} \sum_{(u,i) \in \Omega}
        \big(g(Z_{t, ui}) - X_{ui}\big)^2,

where :math:`c = mn / |\Omega|`, :math:`P_\Omega` keeps the observed entries (zero
elsewhere), :math:`P_r` is the best rank-:math:`r` approximation (truncated SVD) and
:math:`\eta` is the step (``step``). :math:`\hat g_t` is the exact isotonic regression of the
observed ratings on the current scores (:func:`jaxcal.isotonic_regression`, weighted PAV),
extended between its knots by linear interpolation and as a constant beyond them; the
paper's Lipschitz-constrained variant (LPAV) is not implemented. The iterate with the
smallest mean squared error on validation ratings is returned (a split of the training
ratings when none are given).

The whole loop (an SVD of the dense ``m x n`` matrix and a PAV per iteration) is one
compiled program; memory and time grow as :math:`O(mn)` per iteration, which suits data
sets of up to a few thousand users and items (MovieLens-100K: 943 x 1682).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_int, check_real
from jaxcal.data.triples import Interactions
from jaxcal.fitting.isotonic import isotonic_regression_in_program
from jaxcal.recsys._fitted import FactorSizes, all_items
from jaxcal.recsys._train import check_fraction, check_host_ids, check_key, key_parts

__all__ = ["MMC", "MMCModel", "mmc_fit", "rank_projection"]


def rank_projection(matrix: jax.Array, rank: int) -> tuple[jax.Array, jax.Array]:
    """Best rank-``rank`` approximation of ``matrix`` ``[m, n]`` as factors ``(U S, V)``
    (``[m, rank]``, ``[n, rank]``; the approximation is ``(U S) V^T``), by a thin SVD."""
    u, s, vt = jnp.linalg.svd(matrix, full_matrices=False)
    return u[:, :rank] * s[:rank], vt[:rank].T


class _Iterate(NamedTuple):
    user_factors: jax.Array  # [m, r]
    item_factors: jax.Array  # [n, r]
    scores: jax.Array  # [k] Z at the listed entries
    fitted: jax.Array  # [k] the isotonic link at those scores


class MMCFit(NamedTuple):
    """Raw output of :func:`mmc_fit` (padded arrays)."""

    best: _Iterate
    best_iteration: jax.Array  # int: 0 is the initial projection
    validation_mse: jax.Array  # [max_iter + 1]
    train_mse: jax.Array  # [max_iter + 1]


def _weighted_mse(fitted, ratings, weight):
    return jnp.sum(weight * (fitted - ratings) ** 2) / jnp.maximum(jnp.sum(weight), 1.0)


@functools.partial(jit, static_argnames=("rank", "max_iter", "shape"))
def mmc_fit(
    rows: jax.Array,
    cols: jax.Array,
    ratings: jax.Array,
    train_weight: jax.Array,
    validation_weight: jax.Array,
    scale: jax.Array,
    step: jax.Array,
    *,
    rank: int,
    max_iter: int,
    shape: tuple[int, int],
) -> MMCFit:
    r"""The MMC-c iterations (module docstring) as one program.

    Args:
        rows, cols: ``[k]`` entry coordinates in the ``shape`` matrix.
        ratings: ``[k]`` observed values at the entries.
        train_weight: ``[k]`` 1 for the training entries (they drive the gradient and the
            isotonic fit), 0 elsewhere.
        validation_weight: ``[k]`` 1 for the validation entries (scored after each
            iteration), 0 elsewhere. Entries with both weights 0 are padding.
        scale: :math:`c = mn / |\Omega|` (true sizes, not the padded ones).
        step: the step :math:`\eta`.
        rank: the rank :math:`r`.
        max_iter: number of iterations after the initial projection (all run; the best
            on validation is kept).
        shape: ``(m, n)`` of the (padded) matrix; padded rows and columns stay zero.

    Returns:
        An :class:`MMCFit`: the iterate with the smallest validation MSE (the first one on
        ties), its index, and the validation and training MSE of every iterate.
    """

    def scatter(values):
        return jnp.zeros(shape, values.dtype).at[rows, cols].add(values)

    def iterate(matrix):
        us, v = rank_projection(matrix, rank)
        z = jnp.sum(us[rows] * v[cols], axis=-1)
        return _Iterate(
            us, v, z, isotonic_regression_in_program(z, ratings, sample_weight=train_weight)
        )

    def errors(it):
        return (
            _weighted_mse(it.fitted, ratings, validation_weight),
            _weighted_mse(it.fitted, ratings, train_weight),
        )

    first = iterate(scale * scatter(ratings * train_weight))

    def body(carry, _):
        it, best, best_mse, best_t, t = carry
        gradient = scale * scatter((it.fitted - ratings) * train_weight)
        new = iterate(it.user_factors @ it.item_factors.T - step * gradient)
        mse, train = errors(new)
        better = mse < best_mse
        best = jax.tree_util.tree_map(lambda a, b: jnp.where(better, a, b), new, best)
        best_t = jnp.where(better, t + 1, best_t)
        return (new, best, jnp.where(better, mse, best_mse), best_t, t + 1), (mse, train)

    mse0, train0 = errors(first)
    zero = jnp.zeros((), jnp.int32)
    (_, best, _, best_t, _), (mse, train) = jax.lax.scan(
        body, (first, first, mse0, zero, zero), None, length=max_iter
    )
    return MMCFit(
        best, best_t, jnp.concatenate([mse0[None], mse]), jnp.concatenate([train0[None], train])
    )


@functools.partial(jit, static_argnames=("link",))
def _pair_outputs(user_factors, item_factors, link_scores, link_values, users, items, *, link):
    z = jnp.sum(user_factors[users] * item_factors[items], axis=-1)
    return jnp.interp(z, link_scores, link_values) if link else z


@pytree_dataclass
class MMCModel(FactorSizes):
    r"""A fitted monotone matrix completion: :math:`\hat X_{ui} = \hat g(\langle a_u,
    b_i\rangle)`.

    Attributes:
        user_factors: ``[n_users, rank]`` :math:`U S` of the rank-``rank`` SVD of :math:`Z`.
        item_factors: ``[n_items, rank]`` :math:`V`.
        link_scores: ``[k]`` knots of :math:`\hat g`: the training scores in increasing order
            (padded to a bucket size with copies of the last one).
        link_values: ``[k]`` :math:`\hat g` at the knots (non-decreasing).
        validation_mse: ``[max_iter + 1]`` validation MSE of every iterate (0: the initial
            projection).
        train_mse: ``[max_iter + 1]`` training MSE of every iterate.
        best_iteration: index of the returned iterate (smallest validation MSE).
        rank: the rank.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import MMC, MMCModel
        >>> dense = np.random.default_rng(0).integers(0, 6, (20, 15))  # 0: not rated
        >>> model = MMC(rank=2, max_iter=5).fit(Interactions.from_dense(dense),
        ...                                     key=jax.random.key(0))
        >>> isinstance(model, MMCModel), model.predict_all().shape
        (True, (20, 15))
    """

    user_factors: jax.Array
    item_factors: jax.Array
    link_scores: jax.Array
    link_values: jax.Array
    validation_mse: jax.Array
    train_mse: jax.Array
    best_iteration: jax.Array
    rank: int = static_field(default=1)

    def _outputs(self, users: ArrayLike, items: ArrayLike, link: bool) -> jax.Array:
        arrays = (self.user_factors, self.item_factors, self.link_scores, self.link_values)
        if _shapes.is_traced(users, items):
            return _pair_outputs(*arrays, users, items, link=link)
        u, i = check_host_ids(users, items, self.n_users, self.n_items)
        # factors and ids padded to their size buckets: one program per bucket
        user_f, item_f = (_shapes.pad_axis(f, _shapes.padded_size(f.shape[0])) for f in arrays[:2])
        up, ip = _shapes.pad_rows(_shapes.padded_size(u.size), u.ravel(), i.ravel())
        out = _pair_outputs(user_f, item_f, *arrays[2:], up, ip, link=link)
        return _shapes.unpad(out, u.size, u.shape)

    def predict_latent(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        r"""The low-rank scores :math:`Z_{ui}` of ``(users, items)`` (integer ids, broadcast),
        before the link: they rank a user's items without the ties of the step-shaped
        :math:`\hat g`.

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import MMCModel
            >>> z = jnp.zeros(1)  # (no fit history here)
            >>> model = MMCModel(jnp.array([[1.0], [2.0]]), jnp.array([[1.0], [-1.0], [0.5]]),
            ...                  jnp.array([-2.0, 2.0]), jnp.array([1.0, 5.0]), z, z, z)
            >>> model.predict_latent(0, jnp.array([0, 1, 2])).tolist()  # <a_0, b_i>
            [1.0, -1.0, 0.5]
        """
        return self._outputs(users, items, link=False)

    def predict(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        r"""Predicted ratings :math:`\hat g(Z_{ui})` of ``(users, items)`` (integer ids,
        broadcast together); within the range of the training ratings.

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import MMCModel
            >>> z = jnp.zeros(1)
            >>> model = MMCModel(jnp.array([[1.0], [2.0]]), jnp.array([[1.0], [-1.0], [0.5]]),
            ...                  jnp.array([-2.0, 2.0]), jnp.array([1.0, 5.0]), z, z, z)
            >>> model.predict(0, jnp.array([0, 1, 2])).tolist()  # g(z) = 3 + z on [-2, 2]
            [4.0, 2.0, 3.5]
        """
        return self._outputs(users, items, link=True)

    def predict_all(self, users: ArrayLike | None = None) -> jax.Array:
        """``[n, n_items]`` predicted ratings of every item for ``users`` (integer ids;
        default: all users).

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import MMCModel
            >>> eye, none = jnp.eye(2), jnp.zeros(1)
            >>> link = (jnp.array([0.0, 1.0]), jnp.array([1.0, 2.0]))  # g(z) = 1 + z
            >>> MMCModel(eye, eye, *link, none, none, none).predict_all().tolist()  # Z = I
            [[2.0, 1.0], [1.0, 2.0]]
        """
        return all_items(self.predict, users, self.n_users, self.n_items)


def _check_ratings(x: Interactions, name: str) -> np.ndarray:
    if not isinstance(x, Interactions):
        raise ValueError(
            f"{name} must be jaxcal.data.Interactions; got {type(x).__name__}. "
            "Build one with Interactions.create(user, item, rating) or Interactions.from_dense."
        )
    r = np.asarray(x.rating)
    if r.ndim != 1 or r.dtype.kind not in "biuf":
        raise ValueError(f"{name}.rating must be a 1-D numeric array; got dtype {r.dtype}.")
    if not np.isfinite(r.astype(np.float64)).all():
        raise ValueError(f"{name}.rating holds non-finite values.")
    if x.size == 0:
        raise ValueError(f"{name} holds no ratings.")
    return r.astype(np.float64)


def _random_split(n: int, fraction: float, key: jax.Array) -> np.ndarray:
    """Boolean mask of ``round(fraction * n)`` entries chosen uniformly (NumPy, seeded by
    the key's data: no program compiled per ``n``)."""
    data = np.asarray(key_parts(key)[0])
    rng = np.random.default_rng(data.astype(np.uint64).ravel().tolist())
    mask = np.zeros(n, bool)
    mask[rng.permutation(n)[: int(round(fraction * n))]] = True
    return mask


@dataclasses.dataclass(frozen=True)
class MMC:
    r"""Monotone matrix completion (MMC-c; Ganti, Balzano and Willett, NeurIPS 2015).

    See the module docstring for the iterations. A baseline for CMTRF
    (:class:`jaxcal.recsys.CMTRF`): one monotone link shared by all users, learned without
    a parametric form, applied to a low-rank matrix fitted by projected gradient steps.

    Args:
        rank: rank of :math:`Z` (at most ``min(n_users, n_items)``).
        max_iter: iterations after the initial projection (all run; the iterate with the
            smallest validation MSE is kept).
        step: gradient step :math:`\eta` (``> 0``) on the rescaled residual :math:`c
            P_\Omega(\hat g(Z) - X)` (an unbiased estimate of the full residual matrix).
            The default 3 (jaxcal's choice, as is ``max_iter``) gave the best held-out MSE of
            the steps tried (0.2 to 3) on sparse 1..5 ratings (Coat; the ``sd1`` / ``sd2``
            simulations at 8% density, ranks 3-10); too large a step oscillates, and the
            iterate kept is the best on validation.
        validation_fraction: share of the training ratings held out to pick the iterate
            when ``fit`` gets no validation ratings (in ``(0, 1)``).

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import MMC
        >>> rng = np.random.default_rng(0)
        >>> z = rng.normal(size=(40, 2)) @ rng.normal(size=(2, 30))
        >>> ratings = np.digitize(z, [-1.0, 0.0, 1.0]) + 1  # ratings 1..4, monotone in z
        >>> data = Interactions.from_dense(np.where(rng.random(z.shape) < 0.5, ratings, 0))
        >>> model = MMC(rank=2, max_iter=20).fit(data, key=jax.random.key(0))
        >>> model.predict(np.array([0, 1]), np.array([0, 0])).shape
        (2,)
    """

    rank: int = 5
    max_iter: int = 300
    step: float = 3.0
    validation_fraction: float = 0.1

    fitted_class = MMCModel

    def __post_init__(self):
        check_int(self.rank, "rank")
        check_int(self.max_iter, "max_iter", minimum=0)
        check_real(self.step, "step", minimum=0.0, strict=True)
        check_fraction(self.validation_fraction, "validation_fraction")

    def fit(
        self, train: Interactions, *, key: ArrayLike, validation: Interactions | None = None
    ) -> MMCModel:
        """Fit on the ``train`` ratings; pick the iterate on ``validation``.

        Args:
            train: observed ratings (any real values; ``jaxcal.data.Interactions``).
            key: PRNG key; splits ``validation_fraction`` of ``train`` off for validation
                when ``validation`` is None (else unused).
            validation: held-out ratings of the same users and items, scored after each
                iteration; default a random split of ``train``.

        Returns:
            The :class:`MMCModel` of the iterate with the smallest validation MSE.

        Raises:
            ValueError: ``train`` / ``validation`` are not ``Interactions`` of numeric,
                finite ratings, their sizes differ, ``rank`` exceeds ``min(n_users,
                n_items)``, or the training or validation part is empty.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.data import Interactions
            >>> from jaxcal.recsys import MMC
            >>> dense = np.random.default_rng(0).integers(0, 6, (20, 15))
            >>> model = MMC(rank=2, max_iter=5).fit(Interactions.from_dense(dense),
            ...                                     key=jax.random.key(0))
            >>> model.validation_mse.shape  # the initial projection and 5 iterations
            (6,)
        """
        key = check_key(key)
        r_train = _check_ratings(train, "train")
        m, n = int(train.n_users), int(train.n_items)
        if self.rank > min(m, n):
            raise ValueError(f"rank={self.rank} exceeds min(n_users, n_items) = {min(m, n)}.")
        rows, cols = np.asarray(train.user), np.asarray(train.item)
        if validation is None:
            held = _random_split(train.size, self.validation_fraction, key)
            if held.all() or not held.any():
                raise ValueError(
                    f"validation_fraction={self.validation_fraction} of {train.size} ratings "
                    "leaves the training or the validation part empty; pass validation=."
                )
            ratings = r_train
            is_train = ~held
        else:
            r_val = _check_ratings(validation, "validation")
            if (validation.n_users, validation.n_items) != (m, n):
                raise ValueError(
                    f"validation is {validation.n_users} x {validation.n_items} but train is "
                    f"{m} x {n}; both must index the same users and items."
                )
            rows = np.concatenate([rows, np.asarray(validation.user)])
            cols = np.concatenate([cols, np.asarray(validation.item)])
            ratings = np.concatenate([r_train, r_val])
            is_train = np.arange(ratings.size) < train.size
        n_obs = int(is_train.sum())
        k = ratings.size
        size = _shapes.padded_size(k)
        shape = (_shapes.padded_size(m, total=m * n), _shapes.padded_size(n, total=m * n))
        dtype = jnp.result_type(float)
        rows_p, cols_p, ratings_p, w_train, w_val = _shapes.pad_rows(
            size,
            rows.astype(np.int32),
            cols.astype(np.int32),
            ratings.astype(dtype),
            is_train.astype(dtype),
            (~is_train).astype(dtype),
        )
        out = mmc_fit(
            rows_p,
            cols_p,
            ratings_p,
            w_train,
            w_val,
            np.asarray(m * n / n_obs, dtype),
            np.asarray(self.step, dtype),
            rank=self.rank,
            max_iter=self.max_iter,
            shape=shape,
        )
        return _model(out, np.asarray(w_train) > 0, m, n, self.rank)


def _model(out: MMCFit, is_train: np.ndarray, m: int, n: int, rank: int) -> MMCModel:
    """The fitted model on the host: unpadded factors, sorted knots of the link."""
    z = np.asarray(out.best.scores)
    fitted = np.asarray(out.best.fitted)
    kz, kf = z[is_train], fitted[is_train]
    order = np.lexsort((kf, kz))
    kz, kf = kz[order], kf[order]
    top = _shapes.padded_size(kz.size)
    kz, kf = _shapes.pad_rows(top, kz, kf, fills=[kz[-1], kf[-1]])
    return MMCModel(
        user_factors=jax.device_put(np.asarray(out.best.user_factors)[:m]),
        item_factors=jax.device_put(np.asarray(out.best.item_factors)[:n]),
        link_scores=jax.device_put(kz),
        link_values=jax.device_put(kf),
        validation_mse=out.validation_mse,
        train_mse=out.train_mse,
        best_iteration=out.best_iteration,
        rank=rank,
    )
