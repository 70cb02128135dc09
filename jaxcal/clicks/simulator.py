"""Simulate click logs from any click model with known parameters (ground truth).

``params`` describes a world of ``Q`` queries, each with a pool of ``m >= n`` documents:

* ``"alpha"``: ``[Q, m]`` attractiveness (DCTR: the click probability),
* ``"sigma"``: ``[Q, m]`` satisfaction (DBN, SDBN),
* ``"gamma"``: ``[n]`` examination by rank (PBM), ``[n, n]`` (UBM, row ``r - 1``, column
  ``r'`` = rank of the previous click, 0 for none), scalar continuation (DBN),
* ``"lambda"``: ``[n]`` continuation after a click (DCM), ``"tau"``: ``[3]`` (CCM),
* ``"rho"``: scalar (GCTR) or ``[n]`` (RCTR),
* optional ``"query_probs"``: ``[Q]`` query frequencies (default uniform).

Each session draws a query, shows ``n`` of its documents, then draws the hidden variables
rank by rank exactly as the model's generative story says. Document ids are the positions
``0..m-1`` in the query's pool. Which documents, in which order (the SERP model):

* ``shuffle=True`` (default): a fresh random ordering per session, so every document is seen
  at many ranks (identifies position effects; almost no two sessions are identical);
* ``shuffle=False``: every query always shows its documents ``0..n-1`` in order;
* ``serp_variants=k``: the realistic middle ground of real logs, where a query mostly shows
  the same SERP with occasional reshuffles: each query has ``k`` fixed random orderings
  (drawn once), and a session shows variant ``v = 0..k-1`` with probability proportional to
  ``2^-v`` (for ``k = 3``: 4/7, 2/7, 1/7). Sessions then repeat, and
  :meth:`~jaxcal.clicks.Sessions.deduplicate` shrinks the log by an order of magnitude
  (1e6 DBN sessions over 10,000 Zipf-distributed queries: about 1.6e5 distinct rows).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._validation import check_int, check_key
from jaxcal.clicks._base import ClickModel, ClickModelFit
from jaxcal.clicks.cascade import CascadeModel
from jaxcal.clicks.ccm import CCM
from jaxcal.clicks.ctr import DCTR, GCTR, RCTR
from jaxcal.clicks.dbn import DBN, SDBN
from jaxcal.clicks.dcm import DCM
from jaxcal.clicks.pbm import PBM
from jaxcal.clicks.sessions import Sessions
from jaxcal.clicks.ubm import UBM

__all__ = ["MODELS", "simulate", "example_params", "from_params"]

#: model name -> estimator class
MODELS: dict[str, type[ClickModel]] = {
    "GCTR": GCTR,
    "RCTR": RCTR,
    "DCTR": DCTR,
    "PBM": PBM,
    "CM": CascadeModel,
    "DCM": DCM,
    "DBN": DBN,
    "SDBN": SDBN,
    "CCM": CCM,
    "UBM": UBM,
}
_ALIASES = {"CASCADE": "CM", "CASCADEMODEL": "CM"}
_PAIR_PARAMS = ("alpha", "sigma")
_REQUIRED = {
    "GCTR": ("rho",),
    "RCTR": ("rho",),
    "DCTR": ("alpha",),
    "PBM": ("alpha", "gamma"),
    "CM": ("alpha",),
    "DCM": ("alpha", "lambda"),
    "DBN": ("alpha", "sigma", "gamma"),
    "SDBN": ("alpha", "sigma"),
    "CCM": ("alpha", "tau"),
    "UBM": ("alpha", "gamma"),
}


def _model_name(name: str) -> str:
    key = str(name).upper()
    key = _ALIASES.get(key, key)
    if key not in MODELS:
        raise ValueError(f"unknown click model {name!r}; choose one of {sorted(MODELS)}.")
    return key


def example_params(
    model_name: str,
    *,
    n_queries: int = 20,
    n_docs: int = 15,
    n_results: int = 10,
    key: jax.Array,
) -> dict[str, np.ndarray]:
    """Plausible ground-truth parameters for :func:`simulate`: Beta-distributed
    attractiveness ``Beta(1, 2.5)`` and satisfaction ``Beta(2, 2)`` (clipped to
    ``[0.02, 0.98]``), examination decaying with the rank, drawn with ``key``.

    Args:
        model_name: one of ``GCTR, RCTR, DCTR, PBM, CM, DCM, DBN, SDBN, CCM, UBM``.
        n_queries: queries of the simulated world.
        n_docs: documents per query (``>= n_results``).
        n_results: results per SERP.
        key: a JAX PRNG key (``jax.random.key(0)``).

    Returns:
        A dict of NumPy arrays, the ``params`` of :func:`simulate` (module docstring).

    Raises:
        ValueError: on an unknown model, sizes that are not positive integers,
            ``n_docs < n_results``, or a ``key`` that is not a JAX PRNG key.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import example_params
        >>> p = example_params("DBN", n_queries=3, key=jax.random.key(0))
        >>> sorted(p), p["alpha"].shape  # attractiveness and satisfaction per query x doc
        (['alpha', 'gamma', 'sigma'], (3, 15))
    """
    name = _model_name(model_name)
    n_queries = check_int(n_queries, "n_queries")
    n_docs = check_int(n_docs, "n_docs")
    n_results = check_int(n_results, "n_results")
    if n_docs < n_results:
        raise ValueError(f"n_docs ({n_docs}) must be >= n_results ({n_results}).")
    k1, k2 = jax.random.split(check_key(key))
    rank = np.arange(1, n_results + 1)
    alpha = np.asarray(jax.random.beta(k1, 1.0, 2.5, (n_queries, n_docs)), np.float64)
    alpha = np.clip(alpha, 0.02, 0.98)
    sigma = np.clip(np.asarray(jax.random.beta(k2, 2.0, 2.0, (n_queries, n_docs))), 0.02, 0.98)
    out: dict[str, Any] = {"alpha": alpha}
    if name == "GCTR":
        out = {"rho": np.asarray(0.2)}
    elif name == "RCTR":
        out = {"rho": 0.5 / rank}
    elif name == "PBM":
        out["gamma"] = 0.95 / rank**0.7
    elif name == "UBM":
        r = rank[:, None].astype(float)
        prev = np.arange(n_results)[None, :].astype(float)
        used = prev < r  # only r' < r is ever used; other entries are set to 0.5
        dist = np.where(used, np.where(prev > 0, r - prev, r), 1.0)
        gamma = np.clip(0.95 / dist**0.5 - 0.02 * (prev == 0) * r, 0.05, 0.98)
        out["gamma"] = np.where(used, gamma, 0.5)
    elif name == "DCM":
        out["lambda"] = np.clip(0.7 - 0.04 * rank, 0.05, 0.95)
    elif name == "DBN":
        out["sigma"], out["gamma"] = sigma, np.asarray(0.9)
    elif name == "SDBN":
        out["sigma"] = sigma
    elif name == "CCM":
        out["tau"] = np.array([0.85, 0.6, 0.3])
    return out


def _check_params(name: str, params: dict) -> tuple[dict, int, int, int]:
    if not isinstance(params, dict):
        raise ValueError(f"params must be a dict of arrays; got {type(params).__name__}.")
    missing = [k for k in _REQUIRED[name] if k not in params]
    if missing:
        raise ValueError(f"{name} needs parameters {missing}; got {sorted(params)}.")
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    for k, v in p.items():
        if k == "query_probs":
            continue
        if not np.isfinite(v).all() or (v < 0).any() or (v > 1).any():
            raise ValueError(f"parameter {k!r} must hold probabilities in [0, 1].")
    if "alpha" in p:
        if p["alpha"].ndim != 2:
            raise ValueError(f"alpha must be [n_queries, n_docs]; got shape {p['alpha'].shape}.")
        n_q, m = p["alpha"].shape
    else:
        n_q, m = 1, 10
    if "sigma" in p and p["sigma"].shape != (n_q, m):
        raise ValueError(f"sigma must have alpha's shape {(n_q, m)}; got {p['sigma'].shape}.")
    n = None
    for k in ("gamma", "lambda", "rho"):
        if k in p and p[k].ndim >= 1:
            n = p[k].shape[0]
    if name == "UBM" and p["gamma"].shape != (n, n):
        raise ValueError(f"UBM gamma must be [n, n]; got {p['gamma'].shape}.")
    if name == "CCM" and p["tau"].shape != (3,):
        raise ValueError(f"CCM tau must have shape (3,); got {p['tau'].shape}.")
    if n is None:
        n = int(p.get("n_results", min(m, 10)))
    if m < n and name not in ("GCTR", "RCTR"):
        raise ValueError(f"each query needs >= n_results = {n} documents; alpha has {m}.")
    if "query_probs" in p:
        qp = p["query_probs"]
        if qp.shape != (n_q,) or (qp < 0).any() or not qp.sum() > 0:
            raise ValueError("query_probs must be [n_queries] non-negative with positive sum.")
    return p, n_q, m, n


def from_params(model_name: str, params: dict) -> ClickModelFit:
    """The fitted-model object that holds the true parameters (its predictions are the
    true generating probabilities). Pairs are ``(q, j)`` for query ``q``, pool position ``j``.

    Args:
        model_name: the model (as :func:`simulate`).
        params: its ground-truth parameters (as :func:`simulate`).

    Returns:
        The model's fitted class (``FittedDBN`` for ``"DBN"``, ...) holding ``params``.

    Raises:
        ValueError: on an unknown model or missing / malformed parameters.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import FittedPBM, example_params, from_params, simulate
        >>> truth = example_params("PBM", n_queries=2, key=jax.random.key(0))
        >>> model = from_params("PBM", truth)
        >>> log = simulate("PBM", truth, 5, key=jax.random.key(1), shuffle=False)
        >>> isinstance(model, FittedPBM), model.predict_marginal(log).shape  # true P(C_r = 1)
        (True, (5, 10))
    """
    name = _model_name(model_name)
    p, n_q, m, n = _check_params(name, params)
    model_cls = MODELS[name]
    pq = np.repeat(np.arange(n_q, dtype=np.int32), m)
    pd = np.tile(np.arange(m, dtype=np.int32), n_q)
    fitted = {}
    for k in _REQUIRED[name]:
        v = p[k]
        if k in _PAIR_PARAMS:
            v = np.concatenate([v.reshape(-1), [0.5]])
        fitted[k] = jnp.asarray(v)
    if name in ("GCTR", "RCTR"):
        pq, pd = pq[:0], pd[:0]
    return model_cls.fitted_class(
        pair_query=pq,
        pair_doc=pd,
        params=fitted,
        n_iter=jnp.asarray(0, jnp.int32),
        history=jnp.zeros((0,)),
        prior=(1.0, 2.0),
        n_results=n,
    )


@partial(jax.jit, static_argnames=("name",))
def _draw_clicks(name: str, params: dict, alpha, sigma, key) -> jax.Array:
    S, n = alpha.shape
    u = jax.random.uniform(key, (4, n, S), dtype=alpha.dtype)

    def step(carry, xs):
        exam, prev = carry
        r, a, s, u0, u1, u2, u3 = xs
        attractive = u1 < a
        if name in ("GCTR", "RCTR", "DCTR"):
            click = attractive
        elif name == "PBM":
            click = (u0 < params["gamma"][r]) & attractive
        elif name == "UBM":
            click = (u0 < params["gamma"][r][prev]) & attractive
            prev = jnp.where(click, (r + 1).astype(prev.dtype), prev)
        else:
            click = exam & attractive
            if name == "CM":
                go_on = ~click
            elif name == "DCM":
                go_on = jnp.where(click, u2 < params["lambda"][r], True)
            elif name in ("DBN", "SDBN"):
                g = params["gamma"] if name == "DBN" else 1.0
                go_on = ~(click & (u2 < s)) & (u0 < g)
            else:  # CCM
                t = params["tau"]
                relevant = u3 < a
                p_go = jnp.where(click, jnp.where(relevant, t[2], t[1]), t[0])
                go_on = u2 < p_go
            exam = exam & go_on
        return (exam, prev), click

    xs = (jnp.arange(n), alpha.T, sigma.T, u[0], u[1], u[2], u[3])
    init = (jnp.ones(S, bool), jnp.zeros(S, jnp.int32))
    _, clicks = jax.lax.scan(step, init, xs)
    return clicks.T


def simulate(
    model_name: str,
    params: dict,
    n_sessions: int,
    *,
    key: jax.Array,
    shuffle: bool = True,
    serp_variants: int | None = None,
) -> Sessions:
    """Draw ``n_sessions`` sessions from a click model with known parameters.

    Args:
        model_name: one of ``GCTR, RCTR, DCTR, PBM, CM, DCM, DBN, SDBN, CCM, UBM``.
        params: ground-truth parameters (module docstring; :func:`example_params`).
        n_sessions: number of sessions.
        key: a JAX PRNG key (``jax.random.key(0)``).
        shuffle: show a random subset / order of each query's documents (default); if
            ``False`` every query always shows its documents ``0..n-1`` in order.
        serp_variants: if given, each query has this many fixed SERPs (random orderings
            drawn once) shown with probabilities proportional to ``2^-v`` (module
            docstring); overrides ``shuffle``.

    Returns:
        :class:`Sessions` with weight 1 per session.

    Raises:
        ValueError: on an unknown model, missing / malformed parameters, ``n_sessions < 1``,
            ``serp_variants < 1``, or a ``key`` that is not a JAX PRNG key.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import simulate, example_params
        >>> truth = example_params("DBN", key=jax.random.key(0))
        >>> log = simulate("DBN", truth, 1000, key=jax.random.key(1))
        >>> log.clicks.shape
        (1000, 10)
    """
    name = _model_name(model_name)
    if isinstance(n_sessions, bool) or int(n_sessions) != n_sessions or n_sessions < 1:
        raise ValueError(f"n_sessions must be a positive integer; got {n_sessions!r}.")
    n_sessions = int(n_sessions)
    if serp_variants is not None and (
        isinstance(serp_variants, bool)
        or not isinstance(serp_variants, int | np.integer)
        or serp_variants < 1
    ):
        raise ValueError(
            f"serp_variants must be a positive integer or None; got {serp_variants!r}."
        )
    key = check_key(key)
    p, n_q, m, n = _check_params(name, params)
    k_q, k_perm, k_click = jax.random.split(key, 3)
    if "query_probs" in p:
        qp = p["query_probs"] / p["query_probs"].sum()
        query = jax.random.choice(k_q, n_q, (n_sessions,), p=jnp.asarray(qp))
    else:
        query = jax.random.randint(k_q, (n_sessions,), 0, n_q)
    if serp_variants is not None:
        k_serp, k_pick = jax.random.split(k_perm)
        k = int(serp_variants)
        serps = jnp.argsort(jax.random.uniform(k_serp, (n_q, k, m)), axis=2)[:, :, :n]
        logits = -jnp.log(2.0) * jnp.arange(k)
        variant = jax.random.categorical(k_pick, logits, shape=(n_sessions,))
        order = serps[query, variant]
    elif shuffle:
        order = jnp.argsort(jax.random.uniform(k_perm, (n_sessions, m)), axis=1)[:, :n]
    else:
        order = jnp.broadcast_to(jnp.arange(n), (n_sessions, n))
    dtype = jnp.zeros(()).dtype
    if name in ("GCTR", "RCTR"):
        rho = jnp.broadcast_to(jnp.asarray(p["rho"], dtype), (n,))
        alpha = jnp.broadcast_to(rho, (n_sessions, n))
        query = jnp.zeros_like(query)
    else:
        alpha = jnp.asarray(p["alpha"], dtype)[query[:, None], order]
    sigma = jnp.asarray(p["sigma"], dtype)[query[:, None], order] if "sigma" in p else alpha
    model_params = {
        k: jnp.asarray(v, dtype) for k, v in p.items() if k in ("gamma", "lambda", "tau")
    }
    clicks = _draw_clicks(name, model_params, alpha, sigma, k_click)
    return Sessions(
        query=np.asarray(query, np.int32),
        doc=np.asarray(order, np.int32),
        clicks=np.asarray(clicks, np.int8),
        mask=np.ones((n_sessions, n), bool),
        weight=np.ones(n_sessions),
    )
