"""Personalised ranking base models (BPR-MF, UBPR, NCF, CML, LightGCN, WR-MF, popularity)
trained in JAX with on-device sampling, ``sweep`` to train many in one program, and rating
models (CMTRF, MMC).

Every model is a frozen dataclass of hyperparameters (checked when it is built) whose
``fit(train, *, key)`` returns an immutable fitted pytree (its ``fitted_class``) with
``predict(users, items)`` and ``predict_all(users)``; see ``docs/recsys.md`` and
``docs/cmtrf.md``.
"""

from jaxcal._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "BPRMF": "jaxcal.recsys.bpr",
        "UBPR": "jaxcal.recsys.ubpr",
        "NCF": "jaxcal.recsys.ncf",
        "CML": "jaxcal.recsys.cml",
        "LightGCN": "jaxcal.recsys.lightgcn",
        "WRMF": "jaxcal.recsys.wrmf",
        "Popularity": "jaxcal.recsys.popularity",
        "sweep": "jaxcal.recsys._sweep",
        "SweepResult": "jaxcal.recsys._sweep",
        "FactorModel": "jaxcal.recsys._fitted",
        "DistanceModel": "jaxcal.recsys._fitted",
        "NeuMFModel": "jaxcal.recsys.ncf",
        "PopularityModel": "jaxcal.recsys.popularity",
        "propagate": "jaxcal.recsys.lightgcn",
        "CMTRF": "jaxcal.recsys.cmtrf",
        "CMTRFModel": "jaxcal.recsys.cmtrf",
        "Search": "jaxcal.recsys.cmtrf",
        "CMTRFSolver": "jaxcal.recsys.cmtrf",
        "MMC": "jaxcal.recsys.mmc",
        "MMCModel": "jaxcal.recsys.mmc",
    },
)
