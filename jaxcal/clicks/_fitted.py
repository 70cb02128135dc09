"""The fitted click model: :class:`ClickModelFit`, the immutable pytree that every
estimator's ``fit`` returns (one subclass per model, declared by
:func:`jaxcal.clicks._declare.fitted_model`), with its predictions and lookups.

Shape policy (``jaxcal._shapes``): a log to predict is padded to a bucket of rows (masked,
sliced off) and the pair tables to theirs (never indexed: padded and unseen positions point
at the prior-mean slot), so logs of a new size inside a bucket reuse the compiled program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.clicks._checks import check_sessions
from jaxcal.clicks.sessions import PairIndex, Sessions, lookup_pairs

__all__ = ["PAIRS", "RANKS", "ClickModelFit"]

#: In a ``param_shapes`` entry: the axis of a query-document table (one entry per training
#: pair, plus the prior mean for unseen pairs).
PAIRS = "pairs"
#: In a ``param_shapes`` entry: an axis with one entry per rank.
RANKS = "ranks"


@partial(jit, static_argnames=("fn",))
def _apply(fn: Callable, params: dict, qd: jax.Array, clicks: jax.Array, mask: jax.Array):
    probs = fn(params, qd, clicks, mask)
    return jnp.where(mask, probs, 0.0)


@pytree_dataclass
class ClickModelFit:
    """A fitted click model (immutable pytree; subclasses fix the model).

    Attributes:
        pair_query, pair_doc: ``[P]`` the training (query, document) pairs, sorted.
        params: dict of parameter arrays; query-document parameters are ``[P + 1]`` (the
            last entry is the prior mean, predicted for unseen pairs), rank parameters
            ``[n]`` (``[n, n]`` for UBM), global ones scalars.
        n_iter: EM iterations run (0 for closed-form models).
        history: ``[max_iter]`` log posterior of each EM iterate (NaN after stopping).
        prior: the Beta pseudo-counts ``(numerator, denominator)`` (with
            ``prior="empirical"``: those of the rank and global parameters).
        n_results: SERP length seen in training.
        learned_prior: with ``prior="empirical"``, the learned pseudo-counts
            ``(numerator, denominator)`` by table: ``{"alpha": [2]}`` (and ``"sigma"`` for
            DBN and SDBN); what unseen pairs predict is ``numerator / denominator``; empty
            otherwise.

    Example:
        >>> from jaxcal.clicks import ClickModelFit, DCTR, Sessions
        >>> log = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [1, 1]])
        >>> fitted = DCTR().fit(log)
        >>> isinstance(fitted, ClickModelFit), fitted.model_name
        (True, 'DCTR')
        >>> fitted.params["alpha"].tolist()  # (1 + clicks) / (2 + shown); last: unseen pairs
        [0.75, 0.5, 0.5]
    """

    pair_query: np.ndarray
    pair_doc: np.ndarray
    params: dict
    n_iter: Any
    history: Any
    prior: tuple = static_field(default=(1.0, 2.0))
    n_results: int = static_field(default=10)
    learned_prior: dict = dataclasses.field(default_factory=dict)

    model_name: ClassVar[str] = ""
    #: parameter name -> shape, with :data:`PAIRS` for a query-document axis (``[P + 1]``)
    #: and :data:`RANKS` for a per-rank one; other entries are fixed sizes
    param_shapes: ClassVar[dict[str, tuple]] = {"alpha": (PAIRS,)}
    _conditional_fn: ClassVar[Callable]
    _marginal_fn: ClassVar[Callable]

    # ------------------------------------------------------------------ lookups
    def _encode(self, sessions: Sessions) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        sessions = check_sessions(sessions)
        n = sessions.n_results
        if n > self.n_results:
            raise ValueError(
                f"sessions have {n} results per SERP but the model was fitted on "
                f"{self.n_results}; rank parameters beyond rank {self.n_results} are unknown."
            )
        s = sessions.pad_to(self.n_results)
        qd = lookup_pairs(PairIndex(np.asarray(self.pair_query), np.asarray(self.pair_doc)), s)
        return qd, np.asarray(s.clicks), np.asarray(s.mask), n

    def pair_value(self, name: str, query: ArrayLike, doc: ArrayLike) -> np.ndarray:
        """Values of the query-document parameter ``name`` (e.g. ``"alpha"``) for pairs
        (the prior mean for pairs unseen in training).

        Args:
            name: a query-document parameter (one of :meth:`pair_params`).
            query, doc: query and document ids, broadcast against each other.

        Returns:
            The values, of the broadcast shape of ``query`` and ``doc``.

        Example:
            >>> from jaxcal.clicks import DCTR, Sessions
            >>> log = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [1, 1]])
            >>> DCTR().fit(log).pair_value("alpha", 0, [1, 2, 9]).tolist()  # 9: unseen
            [0.75, 0.5, 0.5]
        """
        q = np.atleast_1d(np.asarray(query))
        d = np.atleast_1d(np.asarray(doc))
        q, d = np.broadcast_arrays(q, d)
        fake = Sessions(
            query=q.reshape(-1).astype(np.int32),
            doc=d.reshape(-1, 1).astype(np.int32),
            clicks=np.zeros((q.size, 1), np.int8),
            mask=np.ones((q.size, 1), bool),
            weight=np.ones(q.size),
        )
        qd = lookup_pairs(PairIndex(np.asarray(self.pair_query), np.asarray(self.pair_doc)), fake)
        return np.asarray(self.params[name])[qd[:, 0]].reshape(q.shape)

    def _predict(self, fn: Callable, sessions: Sessions) -> jax.Array:
        qd, clicks, mask, n = self._encode(sessions)
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        clicks = clicks.astype(dtype)
        if _shapes.is_traced(self.params):  # inside the caller's jit: its shapes
            return _apply(fn, self.params, qd, clicks, mask)[:, :n]
        # sessions padded to their bucket (masked rows, sliced off), pair tables to theirs
        # (never indexed: padded and unseen positions point at the prior-mean slot)
        S = qd.shape[0]
        rows = _shapes.padded_size(S, total=S * self.n_results)
        fill = len(self.pair_query)
        qd, clicks, mask = _shapes.pad_rows(rows, qd, clicks, mask, fills=(fill, 0, False))
        out = _apply(fn, self._padded_params(), qd, clicks, mask)
        return jax.device_put(np.asarray(out)[:S, :n])

    def _padded_params(self) -> dict:
        """``params`` with every pair table padded (by its last entry) to its bucket size."""
        size = _shapes.padded_size(len(self.pair_query) + 1)
        return {
            k: _shapes.pad_axis(v, size, np.asarray(v)[-1]) if k in self.pair_params() else v
            for k, v in self.params.items()
        }

    @classmethod
    def pair_params(cls) -> tuple[str, ...]:
        """Names of the query-document parameter tables (``[P + 1]``); the others are per
        rank or global.

        Example:
            >>> from jaxcal.clicks import FittedDBN, FittedPBM
            >>> FittedDBN.pair_params(), FittedPBM.pair_params()
            (('alpha', 'sigma'), ('alpha',))
        """
        return tuple(k for k, shape in cls.param_shapes.items() if PAIRS in shape)

    # ------------------------------------------------------------------ predictions
    def predict_conditional(self, sessions: Sessions) -> jax.Array:
        """``P(C_r = 1 | C_1..C_{r-1})`` given the observed clicks above; ``[S, n]``
        (0 on padded positions). Borisov et al. (2018), Eq. 1.

        Example:
            >>> from jaxcal.clicks import CascadeModel, Sessions
            >>> log = Sessions.from_arrays([0], [[1, 2]], [[1, 0]])
            >>> fitted = CascadeModel().fit(log)  # alpha = 2 / 3 at rank 1
            >>> fitted.predict_conditional(log).round(4).tolist()  # nothing after a click
            [[0.6667, 0.0]]
        """
        return self._predict(type(self)._conditional_fn, sessions)

    def predict_marginal(self, sessions: Sessions) -> jax.Array:
        """Unconditional ``P(C_r = 1)`` (clicks above marginalised out); ``[S, n]`` (0 on
        padded positions). Borisov et al. (2018), Eq. 2.

        Example:
            >>> from jaxcal.clicks import CascadeModel, Sessions
            >>> log = Sessions.from_arrays([0], [[1, 2]], [[1, 0]])
            >>> fitted = CascadeModel().fit(log)  # alpha: 2 / 3 (rank 1), 1 / 2 (unseen)
            >>> fitted.predict_marginal(log).round(4).tolist()  # (1 - 2 / 3) / 2 at rank 2
            [[0.6667, 0.1667]]
        """
        return self._predict(type(self)._marginal_fn, sessions)

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("params")
        if params is not None and name in params:
            return params[name]
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")
