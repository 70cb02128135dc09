"""Exact fitting: the pure solvers the calibrators are built on, one module per concern.

* :mod:`jaxcal.fitting.solver`: the active-set Newton solver for monotone linear-logit maps
  (``solve``, ``solve_batch``, ``SolverStatus``), on the Newton steps of
  :mod:`jaxcal.fitting.newton`;
* :mod:`jaxcal.fitting.linear`: the fits of a linear-logit family built on it
  (``fit_linear``, ``fit_linear_differentiable``, ``kkt_tangent``), and
  :mod:`jaxcal.fitting.streamed`: the same fit over data read in chunks;
* :mod:`jaxcal.fitting.pav`: the pool-adjacent-violators algorithm (``pav``,
  ``pav_differentiable``) and :mod:`jaxcal.fitting.isotonic`: isotonic regression on it;
* :mod:`jaxcal.fitting.score_counts` and :mod:`jaxcal.fitting.streamed_counts`: counts by
  distinct score, for data larger than memory or spread over processes;
* :mod:`jaxcal.fitting.trees`: the oblivious-tree learner of multicalibration;
* :mod:`jaxcal.fitting.folds`: deterministic cross-validation folds.

The public names are these modules (each with its own ``__all__``), imported on first use.
Bayesian fitting over the same families is :mod:`jaxcal.bayes`."""

from jaxcal._lazy import lazy_exports

# name -> module: the submodules themselves.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        name: f"{__name__}.{name}"
        for name in (
            "folds",
            "isotonic",
            "linear",
            "newton",
            "pav",
            "score_counts",
            "solver",
            "streamed",
            "streamed_counts",
            "trees",
        )
    },
)
