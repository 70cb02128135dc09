"""The estimator / fitted-model shell shared by every click model.

* An estimator (``jaxcal.clicks.PBM()``, ...) is a frozen dataclass; ``fit(sessions, *,
  prior=(1, 2), max_iter=50, tol=1e-6, run=RunOptions())`` validates eagerly, merges
  identical sessions, maps (query, document) pairs to ids, and runs the jitted EM loop (or the
  closed-form MLE) of :mod:`jaxcal.clicks._em`. A log given as files or chunks (or any log
  under ``jax.distributed``) is streamed instead (:mod:`jaxcal.clicks._stream`).
* Shape policy (``jaxcal._shapes``): the sessions are padded to a bucket size with rows of
  weight 0 that are fully masked, and the pair tables to theirs with ids no session uses;
  padding adds nothing to the sufficient statistics or the objective, and is sliced off, so
  logs of a new size inside a bucket reuse the compiled EM program (the same holds for the
  predictions).
* The result is a :class:`ClickModelFit` pytree (:mod:`jaxcal.clicks._fitted`; the checks
  of logs are in :mod:`jaxcal.clicks._checks`, how the fit runs in
  :mod:`jaxcal.clicks._options`): the pair vocabulary, a dict of parameter
  arrays (query-document parameters have one extra last entry, the prior mean, used for
  pairs unseen in training), the iteration count and the objective trace. It predicts
  conditional ``P(C_r = 1 | C_<r)`` and marginal ``P(C_r = 1)`` click probabilities and
  saves / loads losslessly.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

import jax
import numpy as np

from jaxcal import _shapes, distributed
from jaxcal._progress import log
from jaxcal.clicks import _empirical
from jaxcal.clicks._checks import check_click_arrays, check_sessions
from jaxcal.clicks._em import Batch, make_batch, run_closed_form, run_em
from jaxcal.clicks._fitted import PAIRS, RANKS, ClickModelFit
from jaxcal.clicks._options import RunOptions
from jaxcal.clicks._stats import mstep_ratios
from jaxcal.clicks._stream import (
    batches,
    scan_log,
    spill_folder,
    stream_closed_form,
    stream_em,
)
from jaxcal.clicks.sessions import PairIndex, Sessions, encode_pairs
from jaxcal.clicks.sources import Source, chunk_source

__all__ = [
    "DEFAULT_PRIOR",
    "PAIRS",
    "RANKS",
    "ClickModel",
    "ClickModelFit",
    "FittedT",
    "check_click_arrays",
    "check_prior",
    "check_sessions",
]

#: The Beta pseudo-counts ``(numerator, denominator)`` of ``fit`` by default.
DEFAULT_PRIOR = (1.0, 2.0)


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


#: the fitted type of a click model (``FittedPBM`` for ``PBM``, ...)
FittedT = TypeVar("FittedT", bound=ClickModelFit)


class ClickModel(Generic[FittedT]):
    """Base of the estimators, generic in the fitted type that ``fit`` returns (``PBM`` is
    a ``ClickModel[FittedPBM]``); subclasses set the class attributes below
    (:func:`jaxcal.clicks._declare.estimator`).

    Example:
        >>> from jaxcal.clicks import DBN, FittedDBN
        >>> from jaxcal.clicks._base import ClickModel
        >>> isinstance(DBN(), ClickModel), DBN.fitted_class is FittedDBN
        (True, True)
    """

    fitted_class: ClassVar[type[ClickModelFit]]
    uses_em: ClassVar[bool] = False
    # EM models: stats(params, batch) -> (stats, loglik); closed form: stats(template, batch)
    _stats: ClassVar[Callable]
    _mstep: ClassVar[Callable] = staticmethod(mstep_ratios)

    @classmethod
    def _init(cls, n_pairs: int, n: int, dtype) -> dict:
        """Initial parameters (NumPy arrays of 0.5, shaped by ``fitted_class.param_shapes``):
        pair tables ``[n_pairs]``, rank axes ``[n]``."""
        sizes = {PAIRS: n_pairs, RANKS: n}
        return {
            k: np.full(tuple(sizes.get(d, d) for d in shape), 0.5, dtype)
            for k, shape in cls.fitted_class.param_shapes.items()
        }

    def fit(
        self,
        sessions: Source,
        *,
        prior: tuple[float, float] | str = DEFAULT_PRIOR,
        max_iter: int = 50,
        tol: float = 1e-6,
        run: RunOptions | None = None,
    ) -> FittedT:
        """Fit the model to a click log, in memory or streamed.

        Args:
            sessions: the training log (its sessions' ``weight`` are their
                multiplicities): a :class:`Sessions`, a path or list of paths (Parquet,
                npz, TianGong-ST or Yandex text), or a zero-argument callable returning an
                iterator of :class:`Sessions` chunks (:mod:`jaxcal.clicks.sources`).
                Anything but a :class:`Sessions` is streamed: read chunk by chunk on every
                EM iteration, so that memory holds one chunk and the parameter tables, never
                the log. Under ``jax.distributed`` (:func:`jaxcal.distributed.initialize`),
                each process passes its own part of the log; the statistics are summed
                across processes and every process returns the same model.
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
            run: how the fit runs (:class:`RunOptions`: deduplication, chunks, spilling,
                device mesh, progress lines; default ``RunOptions()``). The options change
                the work, not the fitted numbers (beyond float rounding).

        Returns:
            The fitted model (an immutable pytree of the estimator's ``fitted_class``:
            ``.predict_conditional``, ``.predict_marginal``).

        Raises:
            ValueError: on a bad log, prior, ``max_iter``, ``tol``, ``run`` or source.

        Example:
            >>> import jax
            >>> from jaxcal.clicks import DBN, FittedDBN, RunOptions, example_params, simulate
            >>> log = simulate("DBN", example_params("DBN", n_queries=2, key=jax.random.key(0)),
            ...                300, key=jax.random.key(1))
            >>> fitted = DBN().fit(log, prior=(1, 5), max_iter=10, run=RunOptions(dedup=False))
            >>> isinstance(fitted, FittedDBN), int(fitted.n_iter) <= 10
            (True, True)
        """
        (a, b), empirical = _resolve_prior(prior)
        if empirical and _empirical.TABLE not in self.fitted_class.pair_params():
            raise ValueError(
                f'prior="empirical" learns the prior of an attractiveness table; '
                f"{type(self).__name__} has none (use a fixed prior)."
            )
        max_iter, tol = _check_em_options(max_iter, tol)
        if run is None:
            run = RunOptions()
        elif not isinstance(run, RunOptions):
            raise ValueError(
                f"run must be a jaxcal.clicks.RunOptions or None; got {type(run).__name__}."
            )
        mesh = run.mesh
        streamed = (
            not isinstance(sessions, Sessions) or run.streams or distributed.process_count() > 1
        )
        if not streamed:
            sessions = check_sessions(sessions)
            if run.dedup:
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
        chunks = chunk_source(sessions, chunk_sessions=run.chunk_size)
        with spill_folder(run.spill) as folder:
            start = time.perf_counter()
            scan = scan_log(chunks, dedup=run.dedup, spill=folder)
            seconds = time.perf_counter() - start
            log(
                f"read {scan.sessions} rows ({scan.weight:.0f} sessions) in {scan.n_chunks} "
                f"chunks, {len(scan.keys)} query-document pairs, {seconds:.1f}s",
                quiet=not run.progress,
            )
            index = PairIndex(
                query=(scan.keys // np.int64(2**31)).astype(np.int32),
                doc=(scan.keys % np.int64(2**31)).astype(np.int32),
            )
            stream = partial(_Streamed, chunks, scan, run.dedup, run.progress)
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
        pair_params = self.fitted_class.pair_params()
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
                params, n_iter, history = stream(self.fitted_class.model_name).em(
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
        return self.fitted_class(
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
    progress: bool
    name: str

    def em(self, stats_fn, mstep_fn, params0, prior, tol, valid, max_iter, mesh):
        return stream_em(
            stats_fn, mstep_fn, params0, self.chunks, self.scan, prior, tol, valid,
            max_iter=max_iter, mesh=mesh, dedup=self.dedup, progress=self.progress,
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
