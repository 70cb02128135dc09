"""Click models for web search, fitted by exact EM / closed-form MLE on accelerators.

Models (Chuklin, Markov & de Rijke, *Click Models for Web Search*, 2015): the CTR
baselines :class:`GCTR`, :class:`RCTR`, :class:`DCTR`; :class:`PBM`, :class:`CascadeModel`,
:class:`DCM`, :class:`DBN`, :class:`SDBN`, :class:`CCM`, :class:`UBM`. Each estimator's
``fit(sessions, *, prior=(1, 2), max_iter=50, tol=1e-6, run=RunOptions())`` returns an
immutable fitted pytree (:class:`FittedPBM`, :class:`FittedDBN`, ...; their base
:class:`ClickModelFit`) with ``predict_conditional`` / ``predict_marginal``;
``sessions`` may also be files or a callable of chunks, streamed on every EM iteration and
summed across the processes of a ``jax.distributed`` job (:mod:`jaxcal.clicks.sources`,
:mod:`jaxcal.distributed`); :class:`RunOptions` groups how the fit runs (deduplication,
chunks, spilling, device mesh, progress lines); and ``prior="empirical"`` learns the
attractiveness (and satisfaction) priors from the log. Logs are
:class:`Sessions` arrays (readers :func:`read_yandex`, :func:`read_tiangong`,
:func:`read_npz`, :func:`read_parquet` / :func:`iter_parquet`; :func:`simulate` for ground
truth); metrics :func:`perplexity`,
:func:`log_likelihood`, :func:`ctr_error`, :func:`reliability_by_rank`; per-rank isotonic
calibration :class:`RankCalibration` (Borisov et al., CIKM 2018). The pure core
(:mod:`jaxcal.clicks.core`) fits and predicts on encoded arrays (:func:`encode_sessions`,
:func:`fit_arrays`, :func:`em_step`, :func:`predict_conditional`, ...) inside a user's
``jit``, ``vmap``, ``grad`` or ``jax.export``, with the estimators' numbers.
"""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        # container and readers
        "Sessions": "jaxcal.clicks.sessions",
        "read_yandex": "jaxcal.clicks.io",
        "iter_yandex": "jaxcal.clicks.io",
        "read_tiangong": "jaxcal.clicks.io",
        "iter_tiangong": "jaxcal.clicks.io",
        "read_npz": "jaxcal.clicks.io",
        "read_parquet": "jaxcal.clicks.io",
        "iter_parquet": "jaxcal.clicks.io",
        "ReadReport": "jaxcal.clicks.io",
        "LogChunks": "jaxcal.clicks.io",
        "UnshownClickWarning": "jaxcal.clicks.io",
        # models
        "GCTR": "jaxcal.clicks.ctr",
        "RCTR": "jaxcal.clicks.ctr",
        "DCTR": "jaxcal.clicks.ctr",
        "PBM": "jaxcal.clicks.pbm",
        "UBM": "jaxcal.clicks.ubm",
        "CascadeModel": "jaxcal.clicks.cascade",
        "DCM": "jaxcal.clicks.dcm",
        "DBN": "jaxcal.clicks.dbn",
        "SDBN": "jaxcal.clicks.dbn",
        "CCM": "jaxcal.clicks.ccm",
        "RunOptions": "jaxcal.clicks._options",
        # fitted models
        "ClickModelFit": "jaxcal.clicks._fitted",
        "FittedGCTR": "jaxcal.clicks.ctr",
        "FittedRCTR": "jaxcal.clicks.ctr",
        "FittedDCTR": "jaxcal.clicks.ctr",
        "FittedPBM": "jaxcal.clicks.pbm",
        "FittedUBM": "jaxcal.clicks.ubm",
        "FittedCascadeModel": "jaxcal.clicks.cascade",
        "FittedDCM": "jaxcal.clicks.dcm",
        "FittedDBN": "jaxcal.clicks.dbn",
        "FittedSDBN": "jaxcal.clicks.dbn",
        "FittedCCM": "jaxcal.clicks.ccm",
        "MODELS": "jaxcal.clicks.simulator",
        # the pure core: inside jit, vmap, grad and jax.export
        "SessionArrays": "jaxcal.clicks.core",
        "PairIndex": "jaxcal.clicks.core",
        "EMResult": "jaxcal.clicks.core",
        "encode_sessions": "jaxcal.clicks.core",
        "init_params": "jaxcal.clicks.core",
        "em_step": "jaxcal.clicks.core",
        "fit_arrays": "jaxcal.clicks.core",
        "predict_conditional": "jaxcal.clicks.core",
        "predict_marginal": "jaxcal.clicks.core",
        "relevance": "jaxcal.clicks.core",
        "click_log_likelihood": "jaxcal.clicks.core",
        "log_posterior": "jaxcal.clicks.core",
        # simulation
        "simulate": "jaxcal.clicks.simulator",
        "example_params": "jaxcal.clicks.simulator",
        "from_params": "jaxcal.clicks.simulator",
        # metrics
        "perplexity": "jaxcal.clicks.metrics",
        "log_likelihood": "jaxcal.clicks.metrics",
        "ctr_error": "jaxcal.clicks.metrics",
        "reliability_by_rank": "jaxcal.clicks.metrics",
        # calibration (Borisov et al. 2018)
        "RankCalibration": "jaxcal.clicks.calibration",
        "FittedRankCalibration": "jaxcal.clicks.calibration",
        "CalibratedClickModel": "jaxcal.clicks.calibration",
        "calibrate_click_model": "jaxcal.clicks.calibration",
    },
)
