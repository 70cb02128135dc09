"""The estimator / fitted-model shell shared by every click model.

* An estimator (``jaxcal.clicks.PBM()``, ...) is a frozen dataclass; ``fit(sessions, *,
  prior=(1, 2), max_iter=50, tol=1e-6, mesh=None, dedup=True)`` validates eagerly, merges
  identical sessions, maps (query, document) pairs to ids, and runs the jitted EM loop (or the
  closed-form MLE) of :mod:`jaxcal.clicks._em`. A log given as files or chunks (or any log
  under ``jax.distributed``) is streamed instead (:mod:`jaxcal.clicks._stream`).
* Shape policy (``jaxcal._shapes``): the sessions are padded to a bucket size with rows of
  weight 0 that are fully masked, and the pair tables to theirs with ids no session uses;
  padding adds nothing to the sufficient statistics or the objective, and is sliced off, so
  logs of a new size inside a bucket reuse the compiled EM program (the same holds for the
  predictions).
* The result is a :class:`ClickModelFit` pytree: the pair vocabulary, a dict of parameter
  arrays (query-document parameters have one extra last entry, the prior mean, used for
  pairs unseen in training), the iteration count and the objective trace. It predicts
  conditional ``P(C_r = 1 | C_<r)`` and marginal ``P(C_r = 1)`` click probabilities and
  saves / loads losslessly.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.typing import ArrayLike

from jaxcal import _shapes, distributed
from jaxcal._jit import jit
from jaxcal._progress import log
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.clicks import _empirical
from jaxcal.clicks._em import Batch, make_batch, run_closed_form, run_em
from jaxcal.clicks._stats import mstep_ratios
from jaxcal.clicks._stream import (
    batches,
    scan_log,
    spill_folder,
    stream_closed_form,
    stream_em,
)
from jaxcal.clicks.sessions import PairIndex, Sessions, encode_pairs, lookup_pairs
from jaxcal.clicks.sources import Source, chunk_source

__all__ = [
    "DEFAULT_PRIOR",
    "PAIRS",
    "RANKS",
    "ClickModel",
    "ClickModelFit",
    "check_click_arrays",
    "check_prior",
    "check_sessions",
]

#: In a ``param_shapes`` entry: the axis of a query-document table (one entry per training
#: pair, plus the prior mean for unseen pairs).
PAIRS = "pairs"
#: In a ``param_shapes`` entry: an axis with one entry per rank.
RANKS = "ranks"
#: The Beta pseudo-counts ``(numerator, denominator)`` of ``fit`` by default.
DEFAULT_PRIOR = (1.0, 2.0)


def check_sessions(sessions: Any, *, name: str = "sessions") -> Sessions:
    """Reject anything but a non-empty :class:`Sessions` with positive total weight."""
    if not isinstance(sessions, Sessions):
        raise ValueError(
            f"{name} must be a jaxcal.clicks.Sessions (use Sessions.from_arrays or a reader); "
            f"got {type(sessions).__name__}."
        )
    if sessions.n_sessions == 0:
        raise ValueError(f"{name} is empty; need at least one session.")
    if not np.sum(np.asarray(sessions.weight)) > 0:
        raise ValueError(f"{name} has zero total weight.")
    return sessions


def check_click_arrays(
    probs: Any, clicks: Any, mask: Any = None, sample_weight: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``[S, n]`` predicted click probabilities and observed clicks eagerly (the
    click metrics and the per-rank calibration); masked entries may hold anything.

    Args:
        probs: ``[S, n]`` predicted click probabilities.
        clicks: ``[S, n]`` observed clicks.
        mask: ``[S, n]`` real results (default all).
        sample_weight: ``[S]`` session multiplicities (default 1).

    Returns:
        ``(probs, clicks, mask, weight)``: float64 ``[S, n]`` probabilities and clicks, the
        boolean ``[S, n]`` mask and float64 ``[S]`` weights.

    Raises:
        ValueError: on shape mismatches, an empty mask, probabilities outside [0, 1], clicks
            not 0/1, or weights that are negative, not finite or give the unmasked results
            zero total weight.
    """
    p = np.asarray(probs, np.float64)
    if p.ndim != 2 or p.size == 0:
        raise ValueError(f"probs must be a non-empty [S, n] array; got shape {p.shape}.")
    c = np.asarray(clicks)
    if c.shape != p.shape:
        raise ValueError(f"shape mismatch: probs {p.shape} but clicks {c.shape}.")
    m = np.ones(p.shape, bool) if mask is None else np.asarray(mask).astype(bool)
    if m.shape != p.shape:
        raise ValueError(f"shape mismatch: probs {p.shape} but mask {m.shape}.")
    if not m.any():
        raise ValueError("mask selects no results.")
    pm = p[m]
    if not np.isfinite(pm).all() or (pm < 0).any() or (pm > 1).any():
        raise ValueError("probs must be finite probabilities in [0, 1] on unmasked entries.")
    if not np.isin(c[m], (0, 1)).all():
        raise ValueError(f"clicks must be 0/1; got values {np.unique(c[m])[:5].tolist()}.")
    w = np.ones(p.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64)
    if w.shape != (p.shape[0],) or not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"sample_weight must be [{p.shape[0]}] finite and non-negative.")
    if not (w[:, None] * m).sum() > 0:
        raise ValueError("sample_weight gives the unmasked results zero total weight.")
    return p, c.astype(np.float64), m, w


def check_prior(prior: Any) -> tuple[float, float]:
    """A Beta pseudo-count prior ``(numerator, denominator)`` with ``0 < num < den``."""
    try:
        a, b = (float(v) for v in prior)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"prior must be a pair (numerator, denominator); got {prior!r}.") from exc
    if not (np.isfinite(a) and np.isfinite(b) and 0 < a < b):
        raise ValueError(
            f"prior must satisfy 0 < numerator < denominator (a prior mean in (0, 1)); "
            f"got ({a}, {b})."
        )
    return a, b


def _resolve_prior(prior: Any) -> tuple[tuple[float, float], bool]:
    """``(fixed pseudo-counts, empirical?)``: ``"empirical"`` learns the priors of the
    attractiveness (and satisfaction) tables and keeps :data:`DEFAULT_PRIOR` for the other
    parameters."""
    if isinstance(prior, str):
        if prior != "empirical":
            raise ValueError(f'prior must be a pair (numerator, denominator) or "empirical"; '
                             f"got {prior!r}.")  # fmt: skip
        return DEFAULT_PRIOR, True
    return check_prior(prior), False


def _check_em_options(max_iter: Any, tol: Any) -> tuple[int, float]:
    if isinstance(max_iter, bool) or not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer; got {max_iter!r}.")
    tol = float(tol)
    if not (tol >= 0 and np.isfinite(tol)):
        raise ValueError(f"tol must be a finite number >= 0; got {tol!r}.")
    return int(max_iter), tol


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
        (the prior mean for pairs unseen in training)."""
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
        rank or global."""
        return tuple(k for k, shape in cls.param_shapes.items() if PAIRS in shape)

    # ------------------------------------------------------------------ predictions
    def predict_conditional(self, sessions: Sessions) -> jax.Array:
        """``P(C_r = 1 | C_1..C_{r-1})`` given the observed clicks above; ``[S, n]``
        (0 on padded positions). Borisov et al. (2018), Eq. 1."""
        return self._predict(type(self)._conditional_fn, sessions)

    def predict_marginal(self, sessions: Sessions) -> jax.Array:
        """Unconditional ``P(C_r = 1)`` (clicks above marginalised out); ``[S, n]`` (0 on
        padded positions). Borisov et al. (2018), Eq. 2."""
        return self._predict(type(self)._marginal_fn, sessions)

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("params")
        if params is not None and name in params:
            return params[name]
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")


class ClickModel:
    """Base of the estimators: subclasses set the class attributes below."""

    fitted_cls: ClassVar[type[ClickModelFit]]
    uses_em: ClassVar[bool] = False
    # EM models: stats(params, batch) -> (stats, loglik); closed form: stats(template, batch)
    _stats: ClassVar[Callable]
    _mstep: ClassVar[Callable] = staticmethod(mstep_ratios)

    @classmethod
    def _init(cls, n_pairs: int, n: int, dtype) -> dict:
        """Initial parameters (NumPy arrays of 0.5, shaped by ``fitted_cls.param_shapes``):
        pair tables ``[n_pairs]``, rank axes ``[n]``."""
        sizes = {PAIRS: n_pairs, RANKS: n}
        return {
            k: np.full(tuple(sizes.get(d, d) for d in shape), 0.5, dtype)
            for k, shape in cls.fitted_cls.param_shapes.items()
        }

    def fit(
        self,
        sessions: Source,
        *,
        prior: tuple[float, float] | str = DEFAULT_PRIOR,
        max_iter: int = 50,
        tol: float = 1e-6,
        mesh: Mesh | None = None,
        dedup: bool = True,
        chunk_sessions: int | None = None,
        spill: bool | str | os.PathLike | None = None,
        verbose: bool = False,
    ) -> ClickModelFit:
        """Fit the model to a click log, in memory or streamed.

        Args:
            sessions: the training log: a :class:`Sessions`, a path or list of paths
                (Parquet, npz, TianGong-ST or Yandex text), or a zero-argument callable
                returning an iterator of :class:`Sessions` chunks
                (:mod:`jaxcal.clicks.sources`). Anything but a :class:`Sessions` is
                streamed: read chunk by chunk on every EM iteration, so that memory holds
                one chunk and the parameter tables, never the log. Under
                ``jax.distributed`` (:func:`jaxcal.distributed.initialize`), each
                process passes its own part of the log; the statistics are summed across
                processes and every process returns the same model.
            prior: Beta pseudo-counts ``(numerator, denominator)`` added to every
                parameter's sufficient statistics: ``theta = (num + sum posterior) /
                (den + sum count)`` (default ``(1, 2)``: unseen pairs predict 0.5); or
                ``"empirical"``: the pseudo-counts of the attractiveness table (and of DBN's
                and SDBN's satisfaction table) are learned from the log by empirical Bayes
                (the marginal likelihood of the observed clicks in each pair's parameter,
                :mod:`jaxcal.clicks._empirical`), alternated with EM twice (the first EM
                with ``(1, 2)``), so that unseen pairs predict values learned from the log
                (``learned_prior`` of the result); the other parameters keep ``(1, 2)``.
            max_iter: maximum EM iterations (ignored by closed-form models).
            tol: EM stops when no parameter changes by ``tol`` or more.
            mesh: a 1-D ``jax.sharding.Mesh``; sessions are split across its devices and
                the sufficient statistics summed with ``psum`` (same result as one device).
            dedup: merge identical sessions first (same result, less work; a streamed
                log is deduplicated chunk by chunk).
            chunk_sessions: SERPs per chunk of a streamed log (default 100,000); given with
                a :class:`Sessions` (or ``spill``), that log is streamed too.
            spill: a streamed log is read from its source on every iteration (``None``,
                the default), or written once, deduplicated and encoded, to a folder
                (a path, which must be empty or new; ``True``: a temporary folder, removed
                afterwards) and read from there (faster when the source is slow to parse).
            verbose: print one line per EM iteration (log-likelihood, sessions per second)
                to stderr.

        Returns:
            The fitted model (a pytree; ``.predict_conditional``, ``.predict_marginal``).

        Raises:
            ValueError: on a bad log, prior, ``max_iter``, ``tol``, ``chunk_sessions`` or
                source.
        """
        (a, b), empirical = _resolve_prior(prior)
        if empirical and _empirical.TABLE not in self.fitted_cls.pair_params():
            raise ValueError(
                f'prior="empirical" learns the prior of an attractiveness table; '
                f"{type(self).__name__} has none (use a fixed prior)."
            )
        max_iter, tol = _check_em_options(max_iter, tol)
        if mesh is not None and not isinstance(mesh, Mesh):
            raise ValueError(f"mesh must be a jax.sharding.Mesh or None; got {type(mesh)}.")
        streamed = (
            not isinstance(sessions, Sessions)
            or chunk_sessions is not None
            or spill not in (None, False)
            or distributed.process_count() > 1
        )
        if not streamed:
            sessions = check_sessions(sessions)
            if dedup:
                sessions = sessions.deduplicate()
            index, qd = encode_pairs(sessions)
            S, n = qd.shape
            n_pairs = index.query.shape[0] + 1  # the last slot: unseen pairs and padding
            # shape policy: sessions padded to their bucket with weight-0, fully masked
            # rows; pair tables to theirs with ids no session uses (sliced off below)
            batch = make_batch(
                qd,
                np.asarray(sessions.clicks),
                np.asarray(sessions.mask),
                sessions.weight,
                mesh,
                n_rows=_shapes.padded_size(S, total=S * n),
                fill_id=n_pairs - 1,
            )
            fit = partial(self._fit_batch, batch, index, n, (a, b), max_iter, tol, mesh, None)
            return self._empirical(fit, [batch]) if empirical else fit()
        if isinstance(sessions, Sessions):
            check_sessions(sessions)
        size = 100_000 if chunk_sessions is None else chunk_sessions
        chunks = chunk_source(sessions, chunk_sessions=size)
        with spill_folder(spill) as folder:
            start = time.perf_counter()
            scan = scan_log(chunks, dedup=dedup, spill=folder)
            seconds = time.perf_counter() - start
            log(
                f"read {scan.sessions} rows ({scan.weight:.0f} sessions) in {scan.n_chunks} "
                f"chunks, {len(scan.keys)} query-document pairs, {seconds:.1f}s",
                quiet=not verbose,
            )
            index = PairIndex(
                query=(scan.keys // np.int64(2**31)).astype(np.int32),
                doc=(scan.keys % np.int64(2**31)).astype(np.int32),
            )
            stream = partial(_Streamed, chunks, scan, dedup, verbose)
            fit = partial(
                self._fit_batch, None, index, scan.n_results, (a, b), max_iter, tol, mesh, stream
            )
            if not empirical:
                return fit()
            return self._empirical(fit, lambda: stream("").batches(mesh))

    def _empirical(self, fit: Callable, batches: Any) -> ClickModelFit:
        """EM alternated with the empirical-Bayes fits of the attractiveness prior and, in
        models with a satisfaction table, the satisfaction prior
        (:mod:`jaxcal.clicks._empirical`); ``batches`` is the log's batches (or a callable
        returning them, for a streamed log)."""
        fitted, learned = fit(), None
        for _ in range(_empirical.ROUNDS):
            found = _empirical.evidence(
                type(fitted), fitted._padded_params(), batches() if callable(batches) else batches
            )
            learned = _empirical.learned_priors(
                found, len(fitted.pair_query), DEFAULT_PRIOR, start=learned
            )
            fitted = fit(priors=learned)
        return dataclasses.replace(fitted, learned_prior=learned)

    def _fit_batch(
        self, batch, index, n, prior, max_iter, tol, mesh, stream, priors=None
    ) -> ClickModelFit:
        """EM (or the closed form) on an in-memory ``batch``, or on a streamed log when
        ``stream`` is given; the fitted model with unpadded pair tables. ``priors``
        overrides ``prior`` for the parameters it names."""
        n_pairs = index.query.shape[0] + 1
        table = _shapes.padded_size(n_pairs)
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        pair_params = self.fitted_cls.pair_params()
        params0 = self._init(table, n, dtype)
        stats_fn, mstep_fn = type(self)._stats, type(self)._mstep
        prior_arr = {
            k: np.asarray((priors or {}).get(k, prior), dtype) for k in params0
        }  # per parameter: one traced pytree, so a new prior compiles nothing
        if self.uses_em:
            valid = {
                k: (np.arange(table) < n_pairs) if k in pair_params else np.ones(v.shape, bool)
                for k, v in params0.items()
            }
            if stream is None:
                res = run_em(
                    stats_fn, mstep_fn, params0, batch, prior_arr, np.asarray(tol, dtype), valid,
                    max_iter=max_iter, mesh=mesh,
                )  # fmt: skip
                params, n_iter, history = res.params, res.n_iter, res.history
            else:
                params, n_iter, history = stream(self.fitted_cls.model_name).em(
                    stats_fn, mstep_fn, params0, prior_arr, tol, valid, max_iter, mesh
                )
                n_iter, history = jax.device_put(np.asarray(n_iter, np.int32)), history
        else:
            if stream is None:
                params = run_closed_form(stats_fn, mstep_fn, params0, batch, prior_arr, mesh=mesh)
            else:
                params = stream("").closed_form(stats_fn, mstep_fn, params0, prior_arr, mesh)
            n_iter, history = np.asarray(0, np.int32), np.zeros((0,), dtype)
        n_iter, history = jax.device_put(n_iter), jax.device_put(history)
        params = {
            k: _shapes.unpad(v, n_pairs) if k in pair_params else v for k, v in params.items()
        }
        return self.fitted_cls(
            pair_query=index.query,
            pair_doc=index.doc,
            params=params,
            n_iter=n_iter,
            history=history,
            prior=prior,
            n_results=n,
        )


@dataclasses.dataclass
class _Streamed:
    """A streamed log bound to its scan, for :meth:`ClickModel._fit_batch`."""

    chunks: Callable
    scan: Any
    dedup: bool
    verbose: bool
    name: str

    def em(self, stats_fn, mstep_fn, params0, prior, tol, valid, max_iter, mesh):
        return stream_em(
            stats_fn, mstep_fn, params0, self.chunks, self.scan, prior, tol, valid,
            max_iter=max_iter, mesh=mesh, dedup=self.dedup, verbose=self.verbose,
            name=self.name,
        )  # fmt: skip

    def closed_form(self, stats_fn, mstep_fn, template, prior, mesh):
        return stream_closed_form(
            stats_fn, mstep_fn, template, self.chunks, self.scan, prior, mesh=mesh,
            dedup=self.dedup,
        )  # fmt: skip

    def batches(self, mesh) -> Iterator[Batch]:
        """The log's chunks as device batches (:func:`jaxcal.clicks._stream.batches`)."""
        return batches(self.chunks, self.scan, mesh, dedup=self.dedup)
