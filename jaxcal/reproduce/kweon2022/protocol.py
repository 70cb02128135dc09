"""What the experiment is: the models and calibrators compared, the data split (training /
validation hold-out, MAR test sample), the propensities, and each protocol's calibration
set (protocols a-d are described in the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np

from jaxcal.data import (
    binarize,
    calibration_pairs,
    holdout_rate,
    holdout_split,
    load_coat,
    load_yahoo_r3,
    simulate_preferences,
)
from jaxcal.debias import holdout_propensity, naive_bayes_propensity, popularity_propensity

__all__ = [
    "MODELS",
    "PROTOCOLS",
    "UNCALIBRATED",
    "NONPARAMETRIC",
    "PARAMETRIC",
    "METHODS",
    "LOSSES",
    "N_NEGATIVES_AUTHORS",
    "MAR_FRACTION",
    "HOLDOUT_FRACTION",
    "PROTOCOL_TITLES",
    "Study",
    "load_study",
    "CalSet",
    "calibration_set",
]

MODELS = ("BPR", "NCF", "CML", "UBPR", "LightGCN")
PROTOCOLS = ("a", "b", "c", "d")
UNCALIBRATED = ("MinMax", "Sigmoid")
NONPARAMETRIC = ("Hist", "Isotonic", "BBQ")
PARAMETRIC = ("Platt", "Beta", "Gaussian", "Gamma")
METHODS = UNCALIBRATED + NONPARAMETRIC + PARAMETRIC
LOSSES = ("naive", "IPS")
N_NEGATIVES_AUTHORS = 57
MAR_FRACTION = 0.05
HOLDOUT_FRACTION = 0.1

PROTOCOL_TITLES = {
    "a": "(a) authors' protocol: 57 sampled negatives per validation positive, popularity "
    "propensities, IPS as in their code (positives weighted 1/w)",
    "b": "(b) all unobserved pairs of the validation users, relative popularity propensities, "
    "unbiased IPS (t = Y/w)",
    "c": "(c) all unobserved pairs, absolute propensities x hold-out factor, unbiased IPS",
    "d": "(d) the fits of (b), level corrected by a logit shift fitted on a 5% MAR sample",
}


@dataclass
class Study:
    """Everything the protocols share: splits, propensities, test pairs."""

    dataset: str
    train: np.ndarray  # [U, I] 0/1 training positives (after the hold-out)
    valid: np.ndarray  # [U, I] 0/1 validation positives
    holdout_rate: np.ndarray  # [U] per-user share held out
    test_user: np.ndarray  # [T] MAR test pairs
    test_item: np.ndarray
    test_label: np.ndarray  # [T] 0/1 true preference
    mar: np.ndarray  # [T] bool, the 5% MAR sample (kept apart from evaluation)
    absolute: np.ndarray  # [U, I] absolute exposure propensities for protocol c
    absolute_source: str
    holdout: str = "per_user_last"  # or "random"
    notes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int]:
        return self.train.shape

    @property
    def eval_mask(self) -> np.ndarray:
        return ~self.mar


def _split_mar(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mar = np.zeros(n, bool)
    mar[rng.choice(n, size=max(1, round(MAR_FRACTION * n)), replace=False)] = True
    return mar


def _holdout(pos: np.ndarray, holdout: str, seed: int) -> tuple:
    """Training / validation positives and the per-user hold-out probability h: the
    realised per-user share for the authors' deterministic rule, the global share for a
    random hold-out (where every positive is held out with the same probability)."""
    if holdout not in ("per_user_last", "random"):
        raise ValueError(f"holdout must be 'per_user_last' or 'random'; got {holdout!r}.")
    key = jax.random.key(seed)  # used by the random hold-out only
    train, valid = holdout_split(pos, fraction=HOLDOUT_FRACTION, method=holdout, key=key)
    if holdout == "random":
        return train, valid, np.full(pos.shape[0], holdout_rate(train, valid))
    return train, valid, holdout_rate(train, valid, per_user=True)


def _from_ratings(train_ratings: np.ndarray, test_ratings: np.ndarray, seed: int, holdout: str):
    train, valid, h = _holdout(binarize(train_ratings), holdout, seed)
    tu, ti = np.nonzero(test_ratings)
    label = (test_ratings[tu, ti] >= 4).astype(np.float64)
    mar = _split_mar(tu.size, seed + 1)
    return train, valid, h, tu, ti, label, mar


def _naive_bayes_matrix(train_ratings, test_ratings, tu, ti, mar) -> np.ndarray:
    """Naive Bayes P(O=1 | rating) (Schnabel et al. 2016) from the MAR sample, for every
    rated training pair; the overall exposure rate elsewhere (unused by the IPS loss, whose
    targets Y/w are 0 on unobserved pairs)."""
    mar_ratings = test_ratings[tu[mar], ti[mar]]
    nb = naive_bayes_propensity(train_ratings, mar_ratings, alpha=1.0)
    omega = np.full(train_ratings.shape, float(nb.observed_rate))
    rated = train_ratings > 0
    omega[rated] = np.asarray(nb.predict(train_ratings[rated]))
    return omega


_NB_SOURCE = "Naive Bayes P(O=1 | rating) from the 5% MAR sample x hold-out factor"


def _coat(seed: int, holdout: str, absolute: str) -> tuple:
    """Coat's split and its exposure propensities (published matrix or Naive Bayes)."""
    coat = load_coat()
    train, valid, h, tu, ti, label, mar = _from_ratings(coat.train, coat.test, seed, holdout)
    if absolute == "naive_bayes":
        omega = _naive_bayes_matrix(coat.train, coat.test, tu, ti, mar)
        source = _NB_SOURCE
    else:
        omega = np.asarray(coat.propensities, np.float64)
        source = "Coat's published propensities (Schnabel et al. 2016) x hold-out factor"
    return train, valid, h, tu, ti, label, mar, omega, source


def _yahoo(yahoo_dir: str | None, seed: int, holdout: str) -> tuple:
    """Yahoo!R3's split and its Naive Bayes exposure propensities."""
    if yahoo_dir is None:
        raise ValueError("--dataset yahoo needs --yahoo-dir (the Webscope R3 files).")
    data = load_yahoo_r3(yahoo_dir)
    tr_r, te_r = data.train.to_dense(), data.test.to_dense()
    train, valid, h, tu, ti, label, mar = _from_ratings(tr_r, te_r, seed, holdout)
    omega = _naive_bayes_matrix(tr_r, te_r, tu, ti, mar)
    return train, valid, h, tu, ti, label, mar, omega, _NB_SOURCE


def _synthetic(seed: int, holdout: str, absolute: str) -> tuple:
    """The simulator's split (16 random test pairs per user) and its true propensities."""
    if absolute == "naive_bayes":
        raise ValueError("absolute='naive_bayes' needs ratings (coat or yahoo).")
    n_u, n_i = 300, 300
    sim = simulate_preferences(n_users=n_u, n_items=n_i, key=jax.random.key(seed), base_rate=0.15)
    # The simulator numbers items by popularity rank; relabel them at random so that an
    # item id carries no information, as in real data (otherwise the authors'
    # per-user-last hold-out would keep exactly the least popular items for validation).
    relabel = np.random.default_rng(seed + 3).permutation(n_i)
    clicks = np.asarray(sim.clicks).reshape(n_u, n_i)[:, relabel].astype(np.int64)
    relevance = np.asarray(sim.relevance).reshape(n_u, n_i)[:, relabel]
    rng = np.random.default_rng(seed + 2)
    ti = np.argsort(rng.random((n_u, n_i)), axis=1)[:, :16].ravel()  # 16 random / user
    tu = np.repeat(np.arange(n_u), 16)
    train, valid, h = _holdout(clicks, holdout, seed)
    label = relevance[tu, ti].astype(np.float64)
    mar = _split_mar(tu.size, seed + 1)
    omega = np.asarray(sim.propensity, np.float64).reshape(n_u, n_i)[:, relabel]
    source = "the simulator's true propensities x hold-out factor"
    return train, valid, h, tu, ti, label, mar, omega, source


def load_study(
    dataset: str,
    *,
    seed: int = 0,
    yahoo_dir: str | None = None,
    holdout: str = "per_user_last",
    absolute: str = "default",
) -> Study:
    """Load and split ``dataset`` (``"coat"``, ``"yahoo"`` or ``"synthetic"``).

    Args:
        dataset: ``"coat"``, ``"yahoo"`` or ``"synthetic"``.
        seed: seed of the MAR split, a random hold-out and the simulator (the data
            functions get ``jax.random.key(seed)``).
        yahoo_dir: folder of the Yahoo!R3 files.
        holdout: ``"per_user_last"`` (the authors' deterministic rule) or ``"random"``.
        absolute: protocol c's propensities: ``"default"`` (Coat: the published matrix;
            Yahoo!R3: Naive Bayes; synthetic: the true ones) or ``"naive_bayes"`` (from the
            5% MAR sample; Coat and Yahoo!R3).

    Raises:
        ValueError: unknown dataset, hold-out or propensity source; missing Yahoo!R3 path.
    """
    if absolute not in ("default", "naive_bayes"):
        raise ValueError(f"absolute must be 'default' or 'naive_bayes'; got {absolute!r}.")
    if dataset == "coat":
        parts = _coat(seed, holdout, absolute)
    elif dataset == "yahoo":
        parts = _yahoo(yahoo_dir, seed, holdout)
    elif dataset == "synthetic":
        parts = _synthetic(seed, holdout, absolute)
    else:
        raise ValueError(f"dataset must be coat, yahoo or synthetic; got {dataset!r}.")
    train, valid, h, tu, ti, label, mar, omega, source = parts
    omega_abs = np.ones_like(omega)
    has = h > 0
    omega_abs[has] = holdout_propensity(omega[has], h[has][:, None])
    return Study(dataset, train, valid, h, tu, ti, label, mar, omega_abs, source, holdout)


@dataclass
class CalSet:
    """One protocol's calibration data for all models."""

    user: np.ndarray
    item: np.ndarray
    labels: np.ndarray
    propensity: np.ndarray
    ips_loss: str  # the library loss used for the "IPS" rows
    base_rate: dict[str, float]


def calibration_set(study: Study, protocol: str, *, seed: int) -> CalSet:
    """The calibration pairs of protocol ``"a"``, ``"b"`` or ``"c"`` and the IPS loss of its
    ``"IPS"`` rows (protocol ``"d"`` reuses the fits of ``"b"``).

    Raises:
        ValueError: ``protocol`` has no calibration set of its own.
    """
    relative = popularity_propensity(study.train.sum(0))
    if protocol == "a":
        cp = calibration_pairs(
            study.valid,
            study.train,
            n_negatives=N_NEGATIVES_AUTHORS,
            key=jax.random.key(seed),
            propensity=relative,
        )
        loss = "ips_positive"
    elif protocol in ("b", "c"):
        cp = calibration_pairs(
            study.valid,
            study.train,
            n_negatives=None,
            propensity=relative if protocol == "b" else study.absolute,
            all_users=study.holdout == "random",  # any user could have had a hold-out
        )
        loss = "ips"
    else:
        raise ValueError(f"no calibration set of its own for protocol {protocol!r}.")
    return CalSet(cp.user, cp.item, cp.labels, cp.propensity, loss, dict(cp.base_rate))
