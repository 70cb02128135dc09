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
    >>> truth = example_params("DBN", n_queries=3, key=jax.random.key(0))
    >>> logs = [simulate("DBN", truth, 300, key=jax.random.key(i)) for i in range(4)]
    >>> encoded = [encode_sessions(log, n_pairs=64)[0] for log in logs]  # one shape
    >>> batch = jax.tree.map(lambda *x: np.stack(x), *encoded)  # [4, ...] leaves
    >>> fit_all = jax.jit(jax.vmap(lambda a: fit_arrays(DBN(), a, max_iter=20).params))
    >>> fit_all(batch)["gamma"].shape  # one continuation probability per log
    (4,)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._shapes import is_traced
from jaxcal.clicks._base import (
    DEFAULT_PRIOR,
    ClickModel,
    check_prior,
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
from jaxcal.clicks._session_arrays import (
    SessionArrays,
    check_arrays,
    encode_sessions,
    float_dtype,
    positive_int,
    valid_arrays,
)
from jaxcal.clicks._stats import chain_loglik
from jaxcal.clicks.sessions import PairIndex

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

# the serialized form of an exported program names its output pytree (SessionArrays, its
# input, is registered with it in jaxcal.clicks._session_arrays)
jax.export.register_namedtuple_serialization(EMResult, serialized_name="jaxcal.clicks.EMResult")


def _check_model(model: Any) -> ClickModel:
    if not isinstance(model, ClickModel):
        raise ValueError(
            f"model must be a click model estimator (jaxcal.clicks.DBN(), ...); "
            f"got {type(model).__name__}."
        )
    return model


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
        if not is_traced(p):
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
    pair_params = model.fitted_class.pair_params()
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

    Example:
        >>> from jaxcal.clicks import DBN, Sessions, encode_sessions, init_params
        >>> log = Sessions.from_arrays([0], [[1, 2, 3]], [[0, 1, 0]])
        >>> arrays, _ = encode_sessions(log, n_pairs=8)
        >>> {k: v.shape for k, v in init_params(DBN(), arrays).items()}
        {'alpha': (8,), 'sigma': (8,), 'gamma': ()}
    """
    model = _check_model(model)
    n = np.shape(arrays.pair_ids)[1]
    return type(model)._init(np.size(arrays.pair_mask), n, float_dtype())


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
        >>> truth = example_params("PBM", n_queries=2, key=jax.random.key(0))
        >>> log = simulate("PBM", truth, 500, key=jax.random.key(0))
        >>> arrays, pairs = encode_sessions(log.deduplicate())
        >>> result = jax.jit(lambda a: fit_arrays(PBM(), a, max_iter=30))(arrays)
        >>> result.params["gamma"].shape, int(result.n_iter) <= 30
        ((10,), True)
    """
    model = _check_model(model)
    arrays = check_arrays(arrays)
    max_iter = positive_int(max_iter, "max_iter")
    dtype = float_dtype()
    if tol is not None and not is_traced(tol):
        if not (np.ndim(tol) == 0 and np.isfinite(float(tol)) and float(tol) >= 0):
            raise ValueError(f"tol must be a finite number >= 0 or None; got {tol!r}.")
    names = tuple(model.fitted_class.param_shapes)
    prior = _prior_tree(prior, names, dtype)
    tol = None if tol is None else jnp.asarray(tol, dtype)
    return _fit(model, arrays, prior, tol, max_iter=max_iter)


@partial(jit, static_argnames=("model", "max_iter"))
def _fit(model: ClickModel, arrays, prior, tol, *, max_iter: int) -> EMResult:
    dtype = float_dtype()
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
    ok = valid_arrays(arrays) & _valid_prior(prior)

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

    Example:
        >>> import jax
        >>> from jaxcal.clicks import PBM, em_step, encode_sessions, example_params
        >>> from jaxcal.clicks import init_params, simulate
        >>> truth = example_params("PBM", n_queries=2, key=jax.random.key(0))
        >>> arrays, _ = encode_sessions(simulate("PBM", truth, 200, key=jax.random.key(1)))
        >>> params = init_params(PBM(), arrays)
        >>> objectives = []
        >>> for _ in range(3):
        ...     params, objective = em_step(PBM(), params, arrays)
        ...     objectives.append(float(objective))
        >>> objectives == sorted(objectives)  # EM never decreases the log posterior
        True
    """
    model = _check_model(model)
    if not model.uses_em:
        raise ValueError(
            f"{type(model).__name__} is fitted in closed form, with no EM step; use fit_arrays."
        )
    arrays = check_arrays(arrays)
    dtype = float_dtype()
    prior = _prior_tree(prior, tuple(params), dtype)
    return _em_step(model, params, arrays, prior)


@partial(jit, static_argnames=("model",))
def _em_step(model: ClickModel, params, arrays, prior):
    cls = type(model)
    dtype = float_dtype()
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

    Example:
        >>> from jaxcal.clicks import CascadeModel, Sessions, encode_sessions, fit_arrays
        >>> from jaxcal.clicks import predict_conditional
        >>> arrays, _ = encode_sessions(Sessions.from_arrays([0], [[1, 2]], [[1, 0]]))
        >>> params = fit_arrays(CascadeModel(), arrays).params
        >>> predict_conditional(CascadeModel(), params, arrays).round(4).tolist()
        [[0.6667, 0.0]]
    """
    return _probs(_check_model(model).fitted_class._conditional_fn, params, arrays)


def predict_marginal(model: ClickModel, params: dict, arrays: SessionArrays) -> jax.Array:
    """Unconditional ``P(C_r = 1)``, the clicks above summed out (Borisov et al. 2018,
    Eq. 2). Arguments as :func:`predict_conditional` (the clicks are not read).

    Returns:
        ``[S, n]`` probabilities, 0 on padded ranks.

    Example:
        >>> from jaxcal.clicks import CascadeModel, Sessions, encode_sessions, fit_arrays
        >>> from jaxcal.clicks import predict_marginal
        >>> arrays, _ = encode_sessions(Sessions.from_arrays([0], [[1, 2]], [[1, 0]]))
        >>> params = fit_arrays(CascadeModel(), arrays).params  # alpha: 2/3, 1/2
        >>> predict_marginal(CascadeModel(), params, arrays).round(4).tolist()
        [[0.6667, 0.1667]]
    """
    return _probs(_check_model(model).fitted_class._marginal_fn, params, arrays)


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

    Example:
        >>> from jaxcal.clicks import SDBN, Sessions, encode_sessions, fit_arrays, relevance
        >>> arrays, _ = encode_sessions(Sessions.from_arrays([0], [[1, 2]], [[1, 0]]))
        >>> params = fit_arrays(SDBN(), arrays).params  # alpha 2/3, 1/2; sigma 2/3, 1/2
        >>> relevance(SDBN(), params, arrays).round(4).tolist()  # alpha * sigma
        [[0.4444, 0.25]]
    """
    model = _check_model(model)
    if "alpha" not in model.fitted_class.pair_params():
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

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import DCTR, Sessions, click_log_likelihood, encode_sessions
        >>> from jaxcal.clicks import fit_arrays
        >>> arrays, _ = encode_sessions(Sessions.from_arrays([0], [[1, 2]], [[1, 0]]))
        >>> params = fit_arrays(DCTR(), arrays).params  # alpha 2/3, 1/3
        >>> float(click_log_likelihood(DCTR(), params, arrays))  # log(2/3) + log(2/3)
        -0.8109...
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

    Example:
        >>> import jax
        >>> from jaxcal.clicks import DCTR, Sessions, encode_sessions, fit_arrays, log_posterior
        >>> arrays, _ = encode_sessions(Sessions.from_arrays([0], [[1, 2]], [[1, 0]]))
        >>> params = fit_arrays(DCTR(), arrays).params
        >>> grad = jax.grad(lambda p: log_posterior(DCTR(), p, arrays))(params)
        >>> bool(abs(grad["alpha"][:2]).max() < 1e-4)  # the closed form maximises it
        True
    """
    model = _check_model(model)
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    prior = _prior_tree(prior, tuple(params), dtype)
    valid = _param_valid(model, params, arrays.pair_mask)
    return click_log_likelihood(model, params, arrays) + log_prior(params, prior, valid)
