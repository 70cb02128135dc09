"""The pure core of the click models: EM on arrays, inside ``jit``, ``vmap``, ``grad`` and
``jax.export``.

An estimator's ``fit`` does host work before any EM runs: it deduplicates the log, maps the
(query, document) pairs to ids, pads to size buckets, streams, shards. The functions here
start after that work: they take an encoded log (:class:`SessionArrays`, made on the host
by :func:`encode_sessions`) and the hyperparameters (the model, the prior, the number of
iterations), and are JAX alone, with no host work and no Python control flow on data, so a
user can put them inside their own ``jit``, batch many logs with ``vmap``, differentiate
the fitted click probabilities with ``jvp`` / ``grad``, and export the program with
``jax.export``. As optax's ``(init, update)`` and blackjax's ``init / step``:

* :func:`init_params` ``(model, arrays) -> params``: the starting point of EM (every
  probability 0.5), a dict of arrays.
* :func:`em_step` ``(model, params, arrays, *, prior) -> (params, objective)``: one exact
  E-step and M-step, and the log posterior of the input ``params``.
* :func:`fit_arrays` ``(model, arrays, *, prior, max_iter, tol) -> EMResult``: the whole
  fit, :func:`em_step` repeated in one ``lax.while_loop`` until no parameter moves by
  ``tol`` (or ``max_iter`` times in one ``lax.scan`` with ``tol=None``); the closed form for
  the models that have one.
* :func:`predict_conditional`, :func:`predict_marginal`, :func:`relevance`,
  :func:`click_log_likelihood`, :func:`log_posterior`: pure functions of the parameters.

``model.fit(sessions)`` runs the same loop (the same E- and M-steps, the same stopping
rule), so it gives the same numbers as :func:`fit_arrays` on the encoded log; its
``params`` are what the functions here take, and theirs are what a fitted model holds.

Invalid input raises ``ValueError`` where the arrays are concrete (outside a trace); inside
a trace, where nothing can raise, an invalid log or prior (pair ids outside the table,
clicks not 0/1, negative or non-finite weights, a prior without ``0 < a < b``) gives
parameters and an objective of NaN, never a plausible number.

Example:
    >>> import jax, numpy as np
    >>> from jaxcal.clicks import DBN, simulate, example_params
    >>> from jaxcal.clicks import encode_sessions, fit_arrays, predict_marginal
    >>> logs = [simulate("DBN", example_params("DBN", n_queries=3), 300, key=jax.random.key(i))
    ...         for i in range(4)]
    >>> encoded = [encode_sessions(log, n_pairs=64)[0] for log in logs]  # one shape
    >>> batch = jax.tree.map(lambda *x: np.stack(x), *encoded)  # [4, ...] leaves
    >>> fit_all = jax.jit(jax.vmap(lambda a: fit_arrays(DBN(), a, max_iter=20).params))
    >>> fit_all(batch)["gamma"].shape  # one continuation probability per log
    (4,)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal.clicks._base import (
    DEFAULT_PRIOR,
    ClickModel,
    check_prior,
    check_sessions,
)
from jaxcal.clicks._em import (
    Batch,
    EMResult,
    em_iteration,
    log_prior,
    run_closed_form,
    run_em,
    run_em_steps,
)
from jaxcal.clicks._stats import chain_loglik
from jaxcal.clicks.sessions import PairIndex, Sessions, encode_pairs, lookup_pairs

__all__ = [
    "EMResult",
    "PairIndex",
    "SessionArrays",
    "click_log_likelihood",
    "em_step",
    "encode_sessions",
    "fit_arrays",
    "init_params",
    "log_posterior",
    "predict_conditional",
    "predict_marginal",
    "relevance",
]


class SessionArrays(NamedTuple):
    """An encoded click log: the input of the pure core (arrays only, a pytree).

    ``S`` sessions (rows), ``n`` ranks, ``T`` entries per pair parameter table. Make it with
    :func:`encode_sessions`; stack several of one shape (``jax.tree.map(np.stack, ...)``)
    to ``vmap`` over logs.

    Attributes:
        pair_ids: ``[S, n]`` int32, the id of the (query, document) pair shown at each rank:
            ``0 .. P - 1`` for the ``P`` pairs of the pair index, ``P`` (the slot whose
            value is the prior mean) on unseen pairs and padded ranks.
        clicks: ``[S, n]`` float, 0/1 (0 on padded ranks).
        mask: ``[S, n]`` bool, ``True`` on real results (a prefix of each row; padding rows
            are all ``False``).
        weight: ``[S]`` float, session multiplicities (0 on padding rows).
        pair_mask: ``[T]`` bool, ``True`` on the ``P + 1`` entries of a pair table that are
            parameters (the pairs and the unseen-pair slot), ``False`` on the padding entries
            that give several logs one table size (no session uses them; they stay at the
            prior mean and are left out of the objective).
    """

    pair_ids: jax.Array
    clicks: jax.Array
    mask: jax.Array
    weight: jax.Array
    pair_mask: jax.Array


# the serialized form of an exported program names its input and output pytrees
jax.export.register_namedtuple_serialization(
    SessionArrays, serialized_name="jaxcal.clicks.SessionArrays"
)
jax.export.register_namedtuple_serialization(EMResult, serialized_name="jaxcal.clicks.EMResult")


def _float_dtype() -> np.dtype:
    return jax.dtypes.canonicalize_dtype(np.float64)  # float32 unless x64 is enabled


def _positive_int(value: Any, name: str, *, minimum: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def encode_sessions(
    sessions: Sessions,
    *,
    pairs: PairIndex | None = None,
    n_sessions: int | None = None,
    n_results: int | None = None,
    n_pairs: int | None = None,
) -> tuple[SessionArrays, PairIndex]:
    """Encode a log for the pure core, eagerly, on the host (NumPy).

    Maps every (query, document) pair to an id and pads, with entries that change no
    result, to the sizes given, so that logs of different sizes share one shape (``vmap``
    over logs, one compiled program for all). Identical sessions are kept as they are:
    encode ``sessions.deduplicate()`` for the same fit with less work (the estimators'
    ``fit`` deduplicates by default).

    Args:
        sessions: the log, a :class:`~jaxcal.clicks.Sessions`.
        pairs: the pair index to encode against, e.g. a training log's (the second result
            of this function, or ``PairIndex(fitted.pair_query, fitted.pair_doc)`` of a
            fitted model): pairs outside it get the unseen-pair id ``P``. Default: the pairs
            of ``sessions`` (sorted by query, then document).
        n_sessions: pad to this many rows (weight 0, fully masked; default: no padding).
        n_results: pad SERPs to this many ranks (masked; default: the log's ``n``).
        n_pairs: the size ``T`` of the pair parameter tables, at least ``P + 1`` (default
            ``P + 1``).

    Returns:
        ``(arrays, pairs)``: the :class:`SessionArrays` (NumPy arrays; clicks and weights
        in JAX's default float dtype) and the :class:`~jaxcal.clicks.PairIndex` of the
        ``P`` pairs, whose id is their position.

    Raises:
        ValueError: if ``sessions`` is not a non-empty log, ``pairs`` is not sorted, or a
            size is smaller than the log's.
    """
    sessions = check_sessions(sessions)
    S, n = sessions.n_sessions, sessions.n_results
    rows = _positive_int(n_sessions, "n_sessions") or S
    ranks = _positive_int(n_results, "n_results") or n
    if rows < S:
        raise ValueError(f"n_sessions={rows} is smaller than the log's {S} sessions.")
    if ranks < n:
        raise ValueError(f"n_results={ranks} is smaller than the log's {n} results per SERP.")
    if pairs is None:
        pairs, ids = encode_pairs(sessions)
    else:
        pairs = PairIndex(np.asarray(pairs.query, np.int32), np.asarray(pairs.doc, np.int32))
        keys = pairs.query.astype(np.int64) * 2**31 + pairs.doc
        if pairs.query.shape != pairs.doc.shape or (np.diff(keys) <= 0).any():
            raise ValueError(
                "pairs must be a PairIndex of distinct (query, document) pairs sorted by "
                "query, then document (as encode_sessions and fit return them)."
            )
        ids = lookup_pairs(pairs, sessions)
    P = pairs.query.shape[0]
    table = _positive_int(n_pairs, "n_pairs") or P + 1
    if table < P + 1:
        raise ValueError(
            f"n_pairs={table} is too small: the log's pair index has {P} pairs, and the "
            f"tables need one more entry (the prior mean of unseen pairs): n_pairs >= {P + 1}."
        )
    dtype = _float_dtype()
    pair_ids = np.full((rows, ranks), P, np.int32)
    pair_ids[:S, :n] = ids
    clicks = np.zeros((rows, ranks), dtype)
    clicks[:S, :n] = np.asarray(sessions.clicks)
    mask = np.zeros((rows, ranks), bool)
    mask[:S, :n] = np.asarray(sessions.mask)
    weight = np.zeros(rows, dtype)
    weight[:S] = np.asarray(sessions.weight)
    arrays = SessionArrays(pair_ids, clicks, mask, weight, np.arange(table) <= P)
    return arrays, pairs


def _is_traced(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def _check_model(model: Any) -> ClickModel:
    if not isinstance(model, ClickModel):
        raise ValueError(
            f"model must be a click model estimator (jaxcal.clicks.DBN(), ...); "
            f"got {type(model).__name__}."
        )
    return model


def _check_arrays(arrays: Any) -> SessionArrays:
    """Shapes always; values too where the arrays are concrete (``ValueError``)."""
    if not isinstance(arrays, SessionArrays):
        raise ValueError(
            f"arrays must be a jaxcal.clicks.SessionArrays (see encode_sessions); "
            f"got {type(arrays).__name__}."
        )
    shape = np.shape(arrays.pair_ids)
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"pair_ids must be a non-empty [S, n] array; got shape {shape}.")
    for name in ("clicks", "mask"):
        if np.shape(getattr(arrays, name)) != shape:
            raise ValueError(
                f"shape mismatch: pair_ids {shape} but {name} {np.shape(getattr(arrays, name))}."
            )
    if np.shape(arrays.weight) != shape[:1]:
        raise ValueError(f"weight must have shape ({shape[0]},); got {np.shape(arrays.weight)}.")
    if np.ndim(arrays.pair_mask) != 1 or np.size(arrays.pair_mask) == 0:
        raise ValueError(
            f"pair_mask must be a non-empty [T] array; got shape {np.shape(arrays.pair_mask)}."
        )
    if _is_traced(arrays):
        return arrays
    ids = np.asarray(arrays.pair_ids)
    clicks = np.asarray(arrays.clicks)
    mask = np.asarray(arrays.mask)
    weight = np.asarray(arrays.weight)
    T = np.size(arrays.pair_mask)
    if ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= T:
        raise ValueError(f"pair_ids must be integers in [0, {T}) (the pair table size T).")
    if mask.dtype != bool:
        raise ValueError(f"mask must be boolean; got dtype {mask.dtype}.")
    if (np.diff(mask.astype(np.int8), axis=1) > 0).any():
        raise ValueError("mask must be a prefix per row (results first, padding last).")
    if not np.isin(clicks, (0, 1)).all() or (clicks[~mask] != 0).any():
        raise ValueError("clicks must be 0/1 on real results and 0 on padded ranks.")
    if not np.isfinite(weight).all() or (weight < 0).any():
        raise ValueError("weight must be finite and non-negative.")
    if not (weight[:, None] * mask).sum() > 0:
        raise ValueError("the log has zero total weight on its real results.")
    return arrays


def _valid_arrays(arrays: SessionArrays) -> jax.Array:
    """Inside the program: whether the log is valid (the eager checks' traced form)."""
    T = arrays.pair_mask.shape[0]
    ids_ok = jnp.all((arrays.pair_ids >= 0) & (arrays.pair_ids < T))
    clicks_ok = jnp.all((arrays.clicks == 0) | (arrays.mask & (arrays.clicks == 1)))
    weight_ok = jnp.all(jnp.isfinite(arrays.weight) & (arrays.weight >= 0))
    return ids_ok & clicks_ok & weight_ok


def _prior_tree(prior: Any, names: Any, dtype: Any) -> dict[str, jax.Array]:
    """One ``[2]`` array of pseudo-counts per parameter (a traced pytree: a new prior
    compiles nothing); a dict ``prior`` names some parameters, the others keep
    :data:`~jaxcal.clicks._base.DEFAULT_PRIOR`."""
    if isinstance(prior, Mapping):
        unknown = set(prior) - set(names)
        if unknown:
            raise ValueError(
                f"prior names parameters the model does not have: {sorted(unknown)}; "
                f"its parameters are {sorted(names)}."
            )
        chosen = {k: prior.get(k, DEFAULT_PRIOR) for k in names}
    else:
        chosen = dict.fromkeys(names, prior)
    out = {}
    for k, p in chosen.items():
        if not _is_traced(p):
            p = check_prior(p)
        elif np.shape(p) != (2,):
            raise ValueError(f"prior of {k!r} must have shape (2,); got {np.shape(p)}.")
        out[k] = jnp.asarray(p, dtype)
    return out


def _valid_prior(prior: dict[str, jax.Array]) -> jax.Array:
    return jnp.all(jnp.stack([(p[0] > 0) & (p[0] < p[1]) for p in prior.values()]))


def _as_batch(arrays: SessionArrays, dtype: Any) -> Batch:
    """The E-steps' input, with the rank-major copies made once, outside the EM loop."""
    ids = arrays.pair_ids.astype(jnp.int32)
    clicks = arrays.clicks.astype(dtype)
    mask = arrays.mask.astype(bool)
    return Batch(ids, clicks, mask, arrays.weight.astype(dtype), ids.T, clicks.T, mask.T)


def _param_valid(model: ClickModel, params: dict, pair_mask: jax.Array) -> dict:
    pair_params = model.fitted_cls.pair_params()
    return {
        k: pair_mask.astype(bool) if k in pair_params else jnp.ones(jnp.shape(v), bool)
        for k, v in params.items()
    }


def init_params(model: ClickModel, arrays: SessionArrays) -> dict[str, np.ndarray]:
    """The starting point of EM: every parameter 0.5, shaped for ``arrays``.

    Args:
        model: the click model (``jaxcal.clicks.DBN()``, ...).
        arrays: the encoded log (only its shapes are read).

    Returns:
        A dict of NumPy arrays: pair tables ``[T]``, rank parameters ``[n]`` (``[n, n]`` for
        UBM), global ones scalars, in JAX's default float dtype.
    """
    model = _check_model(model)
    n = np.shape(arrays.pair_ids)[1]
    return type(model)._init(np.size(arrays.pair_mask), n, _float_dtype())


def fit_arrays(
    model: ClickModel,
    arrays: SessionArrays,
    *,
    prior: Any = DEFAULT_PRIOR,
    max_iter: int = 50,
    tol: float | None = 1e-6,
) -> EMResult:
    """Fit a click model to an encoded log: a pure function, for ``jit``, ``vmap``, export.

    EM models (PBM, UBM, DBN, CCM) start from :func:`init_params` and repeat
    :func:`em_step`: with a ``tol``, in a ``lax.while_loop`` that stops when no parameter
    changes by ``tol`` or more or after ``max_iter`` iterations (``jax.jvp`` differentiates
    through it); with ``tol=None``, exactly ``max_iter`` times in a ``lax.scan``, which
    ``jax.grad`` differentiates too. The closed-form models (GCTR, RCTR, DCTR,
    CascadeModel, DCM, SDBN) take one pass of sufficient statistics. Every parameter is the
    Beta pseudo-count ratio ``theta = (a + sum of posteriors) / (b + sum of counts)``.
    ``model.fit(sessions, prior=..., max_iter=..., tol=...)`` gives the same numbers.

    Args:
        model: the click model (``jaxcal.clicks.DBN()``, ...; static under ``jit``).
        arrays: the encoded log (:func:`encode_sessions`).
        prior: Beta pseudo-counts ``(a, b)`` with ``0 < a < b`` for every parameter, or a
            dict of them by parameter name (the others keep ``(1, 2)``); may be traced
            (a sweep over priors compiles once).
        max_iter: maximum EM iterations (static; ignored by closed-form models).
        tol: stop when no parameter changes by ``tol`` or more (may be traced); ``None``:
            run ``max_iter`` iterations.

    Returns:
        :class:`EMResult`: ``params`` (a dict of arrays; pair tables ``[T]``, whose entry
        ``P`` is the prior mean, predicted for unseen pairs), ``n_iter``, ``delta`` (the
        last change) and ``history`` (``[max_iter]`` log posterior of each iterate, NaN
        after stopping; ``[0]`` for closed-form models). All NaN if, inside a trace, the
        log or the prior is invalid.

    Raises:
        ValueError: for a model that is not a click model, a bad ``max_iter`` / ``tol`` /
            prior, or (concrete arrays) an invalid log.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import PBM, simulate, example_params, encode_sessions, fit_arrays
        >>> log = simulate("PBM", example_params("PBM", n_queries=2), 500, key=jax.random.key(0))
        >>> arrays, pairs = encode_sessions(log.deduplicate())
        >>> result = jax.jit(lambda a: fit_arrays(PBM(), a, max_iter=30))(arrays)
        >>> result.params["gamma"].shape, int(result.n_iter) <= 30
        ((10,), True)
    """
    model = _check_model(model)
    arrays = _check_arrays(arrays)
    max_iter = _positive_int(max_iter, "max_iter")
    dtype = _float_dtype()
    if tol is not None and not _is_traced(tol):
        if not (np.ndim(tol) == 0 and np.isfinite(float(tol)) and float(tol) >= 0):
            raise ValueError(f"tol must be a finite number >= 0 or None; got {tol!r}.")
    names = tuple(model.fitted_cls.param_shapes)
    prior = _prior_tree(prior, names, dtype)
    tol = None if tol is None else jnp.asarray(tol, dtype)
    return _fit(model, arrays, prior, tol, max_iter=max_iter)


@partial(jit, static_argnames=("model", "max_iter"))
def _fit(model: ClickModel, arrays, prior, tol, *, max_iter: int) -> EMResult:
    dtype = _float_dtype()
    batch = _as_batch(arrays, dtype)
    params0 = init_params(model, arrays)
    cls = type(model)
    if model.uses_em:
        valid = _param_valid(model, params0, arrays.pair_mask)
        if tol is None:
            res = run_em_steps(cls._stats, cls._mstep, params0, batch, prior, valid,
                               n_iter=max_iter)  # fmt: skip
        else:
            res = run_em(cls._stats, cls._mstep, params0, batch, prior, tol, valid,
                         max_iter=max_iter)  # fmt: skip
    else:
        params = run_closed_form(cls._stats, cls._mstep, params0, batch, prior)
        zero = jnp.zeros((), dtype)
        res = EMResult(params, jnp.asarray(0, jnp.int32), zero, jnp.zeros((0,), dtype))
    ok = _valid_arrays(arrays) & _valid_prior(prior)

    def nan(v):
        return jnp.where(ok, v, jnp.nan)

    return res._replace(
        params=jax.tree_util.tree_map(nan, res.params), delta=nan(res.delta),
        history=nan(res.history),
    )  # fmt: skip


def em_step(
    model: ClickModel, params: dict, arrays: SessionArrays, *, prior: Any = DEFAULT_PRIOR
) -> tuple[dict, jax.Array]:
    """One exact EM iteration: the E-step at ``params``, then the M-step.

    The step that :func:`fit_arrays` and ``model.fit`` repeat; a user's own loop (another
    stopping rule, a trace of every iterate) calls it from :func:`init_params` on.

    Args:
        model: an EM click model (PBM, UBM, DBN, CCM).
        params: the current iterate (a dict as :func:`init_params` returns).
        arrays: the encoded log.
        prior: as in :func:`fit_arrays`.

    Returns:
        ``(new params, objective)``: the next iterate and the log posterior of ``params``
        (what EM increases: :func:`log_posterior`).

    Raises:
        ValueError: for a closed-form model (it has no EM step: use :func:`fit_arrays`).
    """
    model = _check_model(model)
    if not model.uses_em:
        raise ValueError(
            f"{type(model).__name__} is fitted in closed form, with no EM step; use fit_arrays."
        )
    arrays = _check_arrays(arrays)
    dtype = _float_dtype()
    prior = _prior_tree(prior, tuple(params), dtype)
    return _em_step(model, params, arrays, prior)


@partial(jit, static_argnames=("model",))
def _em_step(model: ClickModel, params, arrays, prior):
    cls = type(model)
    dtype = _float_dtype()
    valid = _param_valid(model, params, arrays.pair_mask)
    new, _, objective = em_iteration(
        cls._stats, cls._mstep, params, _as_batch(arrays, dtype), prior, valid
    )
    return new, objective


@partial(jit, static_argnames=("fn",))
def _probs(fn, params, arrays):
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    mask = arrays.mask.astype(bool)
    probs = fn(params, arrays.pair_ids, arrays.clicks.astype(dtype), mask)
    return jnp.where(mask, probs, 0.0)


def predict_conditional(model: ClickModel, params: dict, arrays: SessionArrays) -> jax.Array:
    """``P(C_r = 1 | C_1 .. C_{r-1})``, given the observed clicks above (Borisov et al.
    2018, Eq. 1); its product over ranks is the likelihood of a session.

    Args:
        model: the click model.
        params: its parameters (:func:`fit_arrays`' ``params``, or a fitted model's
            ``params`` with ``arrays`` encoded against its ``pair_query`` / ``pair_doc``).
        arrays: the encoded log (the clicks above each rank are read).

    Returns:
        ``[S, n]`` probabilities, 0 on padded ranks.
    """
    return _probs(_check_model(model).fitted_cls._conditional_fn, params, arrays)


def predict_marginal(model: ClickModel, params: dict, arrays: SessionArrays) -> jax.Array:
    """Unconditional ``P(C_r = 1)``, the clicks above summed out (Borisov et al. 2018,
    Eq. 2). Arguments as :func:`predict_conditional` (the clicks are not read).

    Returns:
        ``[S, n]`` probabilities, 0 on padded ranks.
    """
    return _probs(_check_model(model).fitted_cls._marginal_fn, params, arrays)


def relevance(model: ClickModel, params: dict, arrays: SessionArrays) -> jax.Array:
    """The relevance of the document at each rank for its query, to rank documents by.

    The attractiveness ``alpha_qd`` (the probability of a click on an examined result),
    and for DBN and SDBN the probability of a satisfied click, ``alpha_qd sigma_qd``
    (Chapelle & Zhang, WWW 2009, Sec. 5). Unseen pairs get the value of the unseen-pair
    slot (the prior mean).

    Args:
        model: a click model with a query-document table (every model but GCTR and RCTR).
        params: its parameters.
        arrays: the encoded log (its ``pair_ids`` and ``mask`` are read).

    Returns:
        ``[S, n]`` relevance, 0 on padded ranks.

    Raises:
        ValueError: for GCTR and RCTR, whose parameters do not depend on the document.
    """
    model = _check_model(model)
    if "alpha" not in model.fitted_cls.pair_params():
        raise ValueError(
            f"{type(model).__name__} has no query-document parameter, so no relevance."
        )
    value = params["alpha"][arrays.pair_ids]
    if "sigma" in params:
        value = value * params["sigma"][arrays.pair_ids]
    return jnp.where(arrays.mask, value, 0.0)


def click_log_likelihood(model: ClickModel, params: dict, arrays: SessionArrays) -> jax.Array:
    """The weighted log-likelihood of the clicks, ``sum_s w_s sum_r log P(C_r = c_r |
    C_<r)`` (from :func:`predict_conditional`): a scalar, differentiable in ``params``.

    Args:
        model: the click model.
        params: its parameters.
        arrays: the encoded log.

    Returns:
        ``[]`` log-likelihood (``-inf`` for a click the model gives probability 0, e.g. a
        second click under the cascade model).
    """
    cond = predict_conditional(model, params, arrays)
    mask = arrays.mask.astype(bool)
    w = jnp.where(mask, arrays.weight[:, None].astype(cond.dtype), 0.0)
    return chain_loglik(w, cond, arrays.clicks, mask)


def log_posterior(
    model: ClickModel, params: dict, arrays: SessionArrays, *, prior: Any = DEFAULT_PRIOR
) -> jax.Array:
    """The objective that EM increases: :func:`click_log_likelihood` plus the log of the
    Beta priors, ``sum a log theta + (b - a) log(1 - theta)`` over every parameter (the
    padding entries of the pair tables left out). Its maximiser is the pseudo-count ratio;
    at a fixed point of EM its gradient in ``params`` is 0 (tested).

    Args:
        model: the click model.
        params: its parameters.
        arrays: the encoded log.
        prior: as in :func:`fit_arrays`.

    Returns:
        ``[]`` log posterior (up to the priors' normalising constants).
    """
    model = _check_model(model)
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    prior = _prior_tree(prior, tuple(params), dtype)
    valid = _param_valid(model, params, arrays.pair_mask)
    return click_log_likelihood(model, params, arrays) + log_prior(params, prior, valid)
