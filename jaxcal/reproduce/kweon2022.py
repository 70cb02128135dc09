r"""Kweon, Kang & Yu (AAAI 2022), "Obtaining Calibrated Probabilities with Personalized
Ranking Models": the calibration study on Coat / Yahoo!R3 / a simulator, under four
protocols that make the base rate explicit (jaxcal issue 7).

Pipeline (the paper's "Evaluation process"): train BPR, NCF, CML, UBPR and LightGCN on the
training positives (rating >= 4) minus a 10% validation hold-out (the authors' deterministic
per-user split), score the calibration pairs, fit every calibrator with the naive and an IPS
loss, and evaluate ECE (15 bins), MCE (15 bins, bins under 0.01% ignored) and NLL on the
missing-at-random test ratings (label: rating >= 4).

Protocols (what the calibration set is and which propensities weight it):

``a``  the authors' code: validation positives + 57 uniformly sampled negatives per positive
       (which sets the level to about 1/58 under the naive loss), popularity propensities
       :math:`(n_i / \max_j n_j)^{0.5}` clipped at 0.1, IPS as in their code (positives
       weighted :math:`1/\omega`, negatives 1: ``loss="ips_positive"``).
``b``  every pair of a validation user without a training positive, the same relative
       popularity propensities, the paper's unbiased IPS form (:math:`t = Y/\omega`).
``c``  as ``b`` with absolute propensities: Coat's published :math:`P(O=1)` matrix (the
       simulator's true one; Naive Bayes from the MAR sample for Yahoo!R3), times the
       hold-out factor :math:`h\omega / (1 - (1 - h)\omega)`.
``d``  the fits of ``b`` with their level corrected by a logit shift fitted on a 5% MAR
       sample of the test ratings (``jaxcal.debias.prior_shift_correction``).

Every protocol is evaluated on the same 95% of the test ratings (the 5% MAR sample is kept
apart for ``d``). Outputs under ``--out``: ``tables/`` (markdown + CSV, the paper's layout
with its published Coat numbers next to ours), ``figures/`` (PNG: Figures 1-4),
``predictions_<protocol>.npz`` (every calibrated test prediction, for independent checks),
``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jaxcal._progress import log

__all__ = ["add_arguments", "run", "reproduce", "PUBLISHED_COAT", "MODELS", "METHODS"]

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

# Published Coat numbers (Kweon et al. 2022: Table 1 ECE, Table 4 MCE, Table 5 NLL), in the
# order BPR, NCF, CML, UBPR, LightGCN. The non-parametric rows have one value each (the
# paper does not say which loss). The MinMax rows of Tables 4 and 5 repeat Table 1's values
# in the published text (kept as printed).
PUBLISHED_COAT: dict[str, dict[tuple[str, str], tuple[float, ...]]] = {
    "ece": {
        ("MinMax", ""): (0.1790, 0.4624, 0.1834, 0.1920, 0.2350),
        ("Sigmoid", ""): (0.2196, 0.1422, 0.0647, 0.1415, 0.0508),
        ("Hist", ""): (0.0552, 0.0230, 0.0161, 0.0514, 0.0470),
        ("Isotonic", ""): (0.0474, 0.0159, 0.0160, 0.0490, 0.0453),
        ("BBQ", ""): (0.0552, 0.0178, 0.0198, 0.0459, 0.0494),
        ("Platt", "naive"): (0.0441, 0.0245, 0.0203, 0.0423, 0.0407),
        ("Beta", "naive"): (0.0451, 0.0258, 0.0270, 0.0416, 0.0407),
        ("Gaussian", "naive"): (0.0436, 0.0264, 0.0245, 0.0410, 0.0404),
        ("Gamma", "naive"): (0.0424, 0.0239, 0.0208, 0.0405, 0.0406),
        ("Platt", "IPS"): (0.0411, 0.0120, 0.0155, 0.0354, 0.0224),
        ("Beta", "IPS"): (0.0414, 0.0075, 0.0183, 0.0375, 0.0266),
        ("Gaussian", "IPS"): (0.0393, 0.0062, 0.0147, 0.0323, 0.0208),
        ("Gamma", "IPS"): (0.0390, 0.0061, 0.0148, 0.0326, 0.0215),
    },
    "mce": {
        ("MinMax", ""): (0.1790, 0.4624, 0.1834, 0.1920, 0.2350),
        ("Sigmoid", ""): (0.3868, 0.6223, 0.6707, 0.2699, 0.4642),
        ("Hist", ""): (0.2492, 0.4083, 0.4924, 0.2910, 0.3940),
        ("Isotonic", ""): (0.2495, 0.4246, 0.4812, 0.2547, 0.3500),
        ("BBQ", ""): (0.2545, 0.3749, 0.3423, 0.3358, 0.2589),
        ("Platt", "naive"): (0.3664, 0.1844, 0.5796, 0.4079, 0.4633),
        ("Beta", "naive"): (0.4071, 0.2175, 0.5782, 0.4352, 0.3367),
        ("Gaussian", "naive"): (0.3177, 0.1678, 0.5878, 0.4807, 0.3854),
        ("Gamma", "naive"): (0.3616, 0.1702, 0.5968, 0.4185, 0.3480),
        ("Platt", "IPS"): (0.2625, 0.1882, 0.4423, 0.2708, 0.2225),
        ("Beta", "IPS"): (0.3278, 0.2085, 0.4150, 0.2574, 0.2501),
        ("Gaussian", "IPS"): (0.2380, 0.1236, 0.3390, 0.2419, 0.2117),
        ("Gamma", "IPS"): (0.2543, 0.1236, 0.4663, 0.2478, 0.2023),
    },
    "nll": {
        ("MinMax", ""): (0.1790, 0.4624, 0.1834, 0.1920, 0.2350),
        ("Sigmoid", ""): (0.6727, 1.0978, 0.4819, 0.6780, 0.6904),
        ("Hist", ""): (0.6264, 0.5116, 0.5412, 0.6177, 0.5077),
        ("Isotonic", ""): (0.5110, 0.4953, 0.4711, 0.5224, 0.5386),
        ("BBQ", ""): (0.4867, 0.4790, 0.4895, 0.5092, 0.4813),
        ("Platt", "naive"): (0.4748, 0.4771, 0.4747, 0.4735, 0.4758),
        ("Beta", "naive"): (0.4766, 0.4796, 0.4747, 0.4741, 0.4776),
        ("Gaussian", "naive"): (0.4766, 0.4768, 0.4755, 0.4730, 0.4761),
        ("Gamma", "naive"): (0.4754, 0.4764, 0.4739, 0.4747, 0.4749),
        ("Platt", "IPS"): (0.4746, 0.4655, 0.4654, 0.4716, 0.4741),
        ("Beta", "IPS"): (0.4744, 0.4684, 0.4665, 0.4713, 0.4751),
        ("Gaussian", "IPS"): (0.4735, 0.4619, 0.4653, 0.4711, 0.4727),
        ("Gamma", "IPS"): (0.4742, 0.4649, 0.4651, 0.4711, 0.4733),
    },
}
# Table 3, Coat columns: ranking quality of the base models.
PUBLISHED_COAT_RANKING: dict[str, tuple[float, ...]] = {
    "NDCG@1": (0.3924, 0.5341, 0.5865, 0.3982, 0.4008),
    "NDCG@3": (0.3761, 0.5129, 0.5020, 0.3962, 0.3973),
    "NDCG@5": (0.4302, 0.5452, 0.5142, 0.4418, 0.4301),
    "Recall@1": (0.1321, 0.2132, 0.2334, 0.1354, 0.1395),
    "Recall@3": (0.2852, 0.4166, 0.3847, 0.3181, 0.3113),
    "Recall@5": (0.4638, 0.5146, 0.4847, 0.4757, 0.4816),
}

PROTOCOL_TITLES = {
    "a": "(a) authors' protocol: 57 sampled negatives per validation positive, popularity "
    "propensities, IPS as in their code (positives weighted 1/w)",
    "b": "(b) all unobserved pairs of the validation users, relative popularity propensities, "
    "unbiased IPS (t = Y/w)",
    "c": "(c) all unobserved pairs, absolute propensities x hold-out factor, unbiased IPS",
    "d": "(d) the fits of (b), level corrected by a logit shift fitted on a 5% MAR sample",
}


# --------------------------------------------------------------------------- data


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
    from jaxcal.data import holdout_rate, holdout_split

    if holdout not in ("per_user_last", "random"):
        raise ValueError(f"holdout must be 'per_user_last' or 'random'; got {holdout!r}.")
    train, valid = holdout_split(pos, fraction=HOLDOUT_FRACTION, method=holdout, key=seed)
    if holdout == "random":
        return train, valid, np.full(pos.shape[0], holdout_rate(train, valid))
    return train, valid, holdout_rate(train, valid, per_user=True)


def _from_ratings(train_ratings: np.ndarray, test_ratings: np.ndarray, seed: int, holdout: str):
    from jaxcal.data import binarize

    train, valid, h = _holdout(binarize(train_ratings), holdout, seed)
    tu, ti = np.nonzero(test_ratings)
    label = (test_ratings[tu, ti] >= 4).astype(np.float64)
    mar = _split_mar(tu.size, seed + 1)
    return train, valid, h, tu, ti, label, mar


def _naive_bayes_matrix(train_ratings, test_ratings, tu, ti, mar) -> np.ndarray:
    """Naive Bayes P(O=1 | rating) (Schnabel et al. 2016) from the MAR sample, for every
    rated training pair; the overall exposure rate elsewhere (unused by the IPS loss, whose
    targets Y/w are 0 on unobserved pairs)."""
    from jaxcal.debias import naive_bayes_propensity

    mar_ratings = test_ratings[tu[mar], ti[mar]]
    nb = naive_bayes_propensity(train_ratings, mar_ratings, alpha=1.0)
    omega = np.full(train_ratings.shape, float(nb.observed_rate))
    rated = train_ratings > 0
    omega[rated] = np.asarray(nb.predict(train_ratings[rated]))
    return omega


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
        seed: seed of the MAR split, a random hold-out and the simulator.
        yahoo_dir: folder of the Yahoo!R3 files.
        holdout: ``"per_user_last"`` (the authors' deterministic rule) or ``"random"``.
        absolute: protocol c's propensities: ``"default"`` (Coat: the published matrix;
            Yahoo!R3: Naive Bayes; synthetic: the true ones) or ``"naive_bayes"`` (from the
            5% MAR sample; Coat and Yahoo!R3).

    Raises:
        ValueError: unknown dataset, hold-out or propensity source; missing Yahoo!R3 path.
    """
    from jaxcal.debias import holdout_propensity

    if absolute not in ("default", "naive_bayes"):
        raise ValueError(f"absolute must be 'default' or 'naive_bayes'; got {absolute!r}.")
    nb_source = "Naive Bayes P(O=1 | rating) from the 5% MAR sample x hold-out factor"
    if dataset == "coat":
        from jaxcal.data import load_coat

        coat = load_coat()
        train, valid, h, tu, ti, label, mar = _from_ratings(coat.train, coat.test, seed, holdout)
        if absolute == "naive_bayes":
            omega = _naive_bayes_matrix(coat.train, coat.test, tu, ti, mar)
            source = nb_source
        else:
            omega = np.asarray(coat.propensities, np.float64)
            source = "Coat's published propensities (Schnabel et al. 2016) x hold-out factor"
    elif dataset == "yahoo":
        if yahoo_dir is None:
            raise ValueError("--dataset yahoo needs --yahoo-dir (the Webscope R3 files).")
        from jaxcal.data import load_yahoo_r3

        data = load_yahoo_r3(yahoo_dir)
        tr_r, te_r = data.train.to_dense(), data.test.to_dense()
        train, valid, h, tu, ti, label, mar = _from_ratings(tr_r, te_r, seed, holdout)
        omega = _naive_bayes_matrix(tr_r, te_r, tu, ti, mar)
        source = nb_source
    elif dataset == "synthetic":
        from jaxcal.data import simulate_preferences

        if absolute == "naive_bayes":
            raise ValueError("absolute='naive_bayes' needs ratings (coat or yahoo).")
        n_u, n_i = 300, 300
        sim = simulate_preferences(n_users=n_u, n_items=n_i, seed=seed, base_rate=0.15)
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
    else:
        raise ValueError(f"dataset must be coat, yahoo or synthetic; got {dataset!r}.")
    omega_abs = np.ones_like(omega)
    has = h > 0
    omega_abs[has] = holdout_propensity(omega[has], h[has][:, None])
    return Study(dataset, train, valid, h, tu, ti, label, mar, omega_abs, source, holdout)


# --------------------------------------------------------------------------- models


def model_specs(*, quick: bool) -> dict[str, Any]:
    """The five base models with the paper's hyperparameters (Appendix E): 128 factors (NCF
    64), batch 512, learning rate 0.001, weight decay 0.001, one negative per positive."""
    from jaxcal.recsys import BPRMF, CML, NCF, UBPR, LightGCN

    steps = 150 if quick else 3000
    dim = 16 if quick else 128
    common = dict(lr=0.001 if not quick else 0.01, n_steps=steps, batch_size=512)
    return {
        "BPR": BPRMF(dim=dim, l2=0.001, **common),
        "NCF": NCF(dim=dim // 2, hidden=(dim, dim // 2), n_negatives=1, l2=0.001, **common),
        "CML": CML(dim=dim, margin=0.5, **common),
        "UBPR": UBPR(dim=dim, l2=0.001, **common),
        "LightGCN": LightGCN(dim=dim, l2=0.001, n_layers=2, **common),
    }


def train_models(study: Study, *, quick: bool, seed: int, quiet: bool) -> dict[str, np.ndarray]:
    """Train the five models; return each one's ``[U, I]`` score matrix (float64)."""
    import jax

    from jaxcal.debias import popularity_propensity

    scores = {}
    pop = popularity_propensity(study.train.sum(0))
    for k, (name, model) in enumerate(model_specs(quick=quick).items()):
        start = time.perf_counter()
        kw = {"propensity": pop} if name == "UBPR" else {}
        fitted = model.fit(study.train, key=jax.random.key(seed + k), **kw)
        scores[name] = np.asarray(fitted.score_all(), np.float64)
        log(f"kweon2022: trained {name} [{time.perf_counter() - start:.1f}s]", quiet=quiet)
    return scores


def ranking_table(study: Study, scores: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """NDCG@k / Recall@k (k = 1, 3, 5) and AUC on the MAR test ratings (Table 3)."""
    from jaxcal.metrics.ranking import auc, ndcg_at_k, recall_at_k

    labels = np.zeros(study.shape)
    mask = np.zeros(study.shape, bool)
    labels[study.test_user, study.test_item] = study.test_label
    mask[study.test_user, study.test_item] = True
    out = {}
    for name, s in scores.items():
        row = {}
        for k in (1, 3, 5):
            row[f"NDCG@{k}"] = float(ndcg_at_k(s, labels, k=k, mask=mask))
            row[f"Recall@{k}"] = float(recall_at_k(s, labels, k=k, mask=mask))
        row["AUC"] = float(auc(s, labels, mask=mask))
        out[name] = row
    return out


# --------------------------------------------------------------------------- calibrators


def _sigmoid_input(scores: np.ndarray) -> np.ndarray:
    """The paper's rescaling into (0, 1) for Beta calibration and BBQ: sigmoid(s), with the
    score clipped to [-30, 30] first so that it stays strictly inside (0, 1) in float64."""
    return 1.0 / (1.0 + np.exp(-np.clip(scores, -30.0, 30.0)))


def available_calibrators(n_bins_hist: int) -> tuple[dict[str, tuple[Any, bool]], list[str]]:
    """``name -> (estimator, sigmoid_input)`` for every calibrator importable now, and
    notes on those skipped."""
    import jaxcal.calibrators as cal

    wanted = {
        "Hist": ("HistogramBinning", {"n_bins": n_bins_hist}, False),
        "Isotonic": ("IsotonicCalibration", {}, False),
        "BBQ": ("BBQ", {}, True),
        "Platt": ("PlattScaling", {}, False),
        "Beta": ("BetaCalibration", {"rescale": "none"}, True),
        "Gaussian": ("GaussianCalibration", {}, False),
        "Gamma": ("GammaCalibration", {}, False),
    }
    out, notes = {}, []
    for name, (cls_name, kwargs, sig) in wanted.items():
        try:
            cls = getattr(cal, cls_name)
        except (ImportError, AttributeError) as exc:
            notes.append(f"{name} skipped: jaxcal.calibrators.{cls_name} not importable ({exc}).")
            continue
        try:
            est = cls(**kwargs)
        except TypeError:
            est = cls()
        out[name] = (est, sig)
    return out, notes


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
    from jaxcal.data import calibration_pairs
    from jaxcal.debias import popularity_propensity

    relative = popularity_propensity(study.train.sum(0))
    if protocol == "a":
        cp = calibration_pairs(
            study.valid,
            study.train,
            n_negatives=N_NEGATIVES_AUTHORS,
            key=seed,
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


def _fit(est, scores, labels, *, propensity, loss):
    """Fit one calibrator; return (fitted or None, note or None). Warnings (e.g. a solver
    that did not converge) and input errors become notes in the report."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fitted = est.fit(scores, labels, propensity=propensity, loss=loss)
        except (ValueError, FloatingPointError) as exc:
            return None, f"failed: {exc}"
    note = "; ".join(sorted({str(w.message).splitlines()[0] for w in caught})) or None
    return fitted, note


def _predict(fitted, scores) -> np.ndarray:
    return np.clip(np.asarray(fitted.predict(scores), np.float64), 0.0, 1.0)


# --------------------------------------------------------------------------- metrics


def evaluate(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """ECE and MCE with 15 equal-width bins (MCE ignores bins with < 0.01% of the samples,
    as the authors' code), NLL = mean binary cross-entropy."""
    from jaxcal.metrics import ece, mce, nll

    return {
        "ece": float(ece(probs, labels, n_bins=15)),
        "mce": float(mce(probs, labels, n_bins=15, min_fraction=1e-4)),
        "nll": float(nll(probs, labels)),
    }


def _key(model: str, method: str, loss: str) -> str:
    return f"{model}__{method}__{loss or 'none'}"


# --------------------------------------------------------------------------- one protocol


def run_protocol(
    study: Study,
    protocol: str,
    scores: dict[str, np.ndarray],
    calibrators: dict[str, tuple[Any, bool]],
    *,
    seed: int,
    fitted_b: dict | None,
    quiet: bool,
) -> tuple[dict, dict, dict, dict]:
    """Fit and evaluate one protocol. Returns (metrics, predictions, fitted, info)."""
    from jaxcal.debias import prior_shift_correction

    ev = study.eval_mask
    y_eval = study.test_label[ev]
    metrics: dict[str, dict[str, float]] = {}
    preds: dict[str, np.ndarray] = {}
    fitted_all: dict[str, Any] = {}
    notes: dict[str, str] = {}
    info: dict[str, Any] = {"title": PROTOCOL_TITLES[protocol]}
    cal = None
    if protocol != "d":
        cal = calibration_set(study, protocol, seed=seed)
        info.update(
            n_calibration_pairs=int(cal.labels.size),
            n_positives=int(cal.labels.sum()),
            ips_loss=cal.ips_loss,
            implied_base_rate={k: float(v) for k, v in cal.base_rate.items()},
        )
    info["test_base_rate"] = float(y_eval.mean())
    info["mar_base_rate"] = float(study.test_label[study.mar].mean())
    for model, s_all in scores.items():
        start = time.perf_counter()
        s_eval = s_all[study.test_user, study.test_item][ev]
        lo, hi = s_eval.min(), s_eval.max()
        preds[_key(model, "MinMax", "")] = (s_eval - lo) / max(hi - lo, 1e-300)
        preds[_key(model, "Sigmoid", "")] = _sigmoid_input(s_eval)
        s_mar = s_all[study.test_user, study.test_item][study.mar]
        for method, (est, sig) in calibrators.items():
            for loss_name in LOSSES:
                key = _key(model, method, loss_name)
                x_eval = _sigmoid_input(s_eval) if sig else s_eval
                if protocol == "d":
                    base = (fitted_b or {}).get(key)
                    if base is None:
                        continue
                    x_mar = _sigmoid_input(s_mar) if sig else s_mar
                    try:
                        fitted = prior_shift_correction(base, x_mar, study.test_label[study.mar])
                    except ValueError as exc:
                        notes[key] = f"correction failed: {exc}"
                        continue
                else:
                    s_cal = s_all[cal.user, cal.item]
                    x_cal = _sigmoid_input(s_cal) if sig else s_cal
                    # The naive loss is the IPS loss with every propensity 1 (t = Y,
                    # w = 1 under "ips" and "ips_positive"), exactly; fitting it that way
                    # reuses the compiled IPS fit instead of compiling a second one.
                    omega = np.ones_like(cal.propensity) if loss_name == "naive" else None
                    fitted, note = _fit(
                        est,
                        x_cal,
                        cal.labels,
                        propensity=cal.propensity if omega is None else omega,
                        loss=cal.ips_loss,
                    )
                    if note:
                        notes[key] = note
                    if fitted is None:
                        continue
                fitted_all[key] = fitted
                preds[key] = _predict(fitted, x_eval)
        log(
            f"kweon2022: protocol {protocol}, {model}: calibrated "
            f"[{time.perf_counter() - start:.1f}s]",
            quiet=quiet,
        )
    for key, p in preds.items():
        metrics[key] = evaluate(p, y_eval)
        metrics[key]["mean_p"] = float(p.mean())
    info["notes"] = notes
    return metrics, preds, fitted_all, info


# --------------------------------------------------------------------------- ratio sweep


def ratio_sweep(
    study: Study,
    scores: dict[str, np.ndarray],
    calibrators: dict[str, tuple[Any, bool]],
    ratios: tuple[int, ...],
    *,
    seed: int,
    quiet: bool,
) -> list[list[Any]]:
    """Gaussian calibration fitted on validation positives + ``r`` sampled negatives per
    positive, for each ``r``: the level it inherits (closed form 1/(1 + r) under the naive
    loss) and the test ECE. Shows which ratio the published Coat numbers correspond to."""
    from jaxcal.data import calibration_pairs
    from jaxcal.debias import popularity_propensity

    if "Gaussian" not in calibrators:
        return []
    est = calibrators["Gaussian"][0]
    relative = popularity_propensity(study.train.sum(0))
    ev = study.eval_mask
    y = study.test_label[ev]
    rows = []
    for r in ratios:
        cp = calibration_pairs(
            study.valid, study.train, n_negatives=r, key=seed, propensity=relative
        )
        for model, s_all in scores.items():
            s_cal = s_all[cp.user, cp.item]
            s_eval = s_all[study.test_user, study.test_item][ev]
            row: list[Any] = [r, model, cp.base_rate["naive"]]
            for omega in (np.ones_like(cp.propensity), cp.propensity):
                fitted, _ = _fit(est, s_cal, cp.labels, propensity=omega, loss="ips_positive")
                p = _predict(fitted, s_eval) if fitted is not None else None
                row += [None, None] if p is None else [float(p.mean()), evaluate(p, y)["ece"]]
            rows.append(row)
        log(f"kweon2022: negative-ratio sweep, r = {r}", quiet=quiet)
    return rows


# --------------------------------------------------------------------------- tables


def _rows_for(method: str) -> list[tuple[str, str, str]]:
    """(type, method, loss) rows of the paper's layout for ``method``."""
    if method in UNCALIBRATED:
        return [("uncalibrated", method, "")]
    if method in NONPARAMETRIC:
        return [("non-parametric", method, "naive"), ("non-parametric", method, "IPS")]
    return [("parametric", method, "naive"), ("parametric", method, "IPS")]


def metric_rows(metrics: dict, metric: str, models: tuple[str, ...], published: bool):
    """Rows of one metric table: type, method, loss, then per model ours (and paper)."""
    rows = []
    order = [r for m in METHODS for r in _rows_for(m)]
    order = [r for r in order if r[2] == "" or r[2] == "naive"] + [
        r for r in order if r[2] == "IPS"
    ]
    for typ, method, loss in order:
        keys = [_key(m, method, loss) for m in models]
        if not any(k in metrics for k in keys):
            continue
        row: list[Any] = [typ, method, loss or "-"]
        pub_key = (method, loss if method in PARAMETRIC else "")
        pub = PUBLISHED_COAT[metric].get(pub_key) if published else None
        pub_here = pub is not None and (method in PARAMETRIC or loss in ("", "naive"))
        for j, key in enumerate(keys):
            row.append(metrics[key][metric] if key in metrics else None)
            if published:
                row.append(pub[j] if pub_here else None)
        rows.append(row)
    return rows


def metric_header(models: tuple[str, ...], published: bool) -> list[str]:
    header = ["type", "method", "loss"]
    for m in models:
        header += [m, f"{m} (paper)"] if published else [m]
    return header


def write_tables(
    out: Path, dataset: str, results: dict, ranking: dict, info: dict, sweep: list
) -> list[Path]:
    from jaxcal.reproduce._tables import write_table

    published = dataset == "coat"
    paths = []
    if sweep:
        paths += write_table(
            out / "tables" / "negative_ratio",
            [
                "negatives per positive r",
                "model",
                "implied base rate 1/(1+r)",
                "mean p Gaussian naive",
                "ECE Gaussian naive",
                "mean p Gaussian IPS (authors')",
                "ECE Gaussian IPS (authors')",
            ],
            sweep,
            caption=f"{dataset}: Gaussian calibration on validation positives + r sampled "
            "negatives; the ratio sets the level. MAR test base rate "
            f"{info['test_base_rate']:.4f}.",
        )
    models = MODELS
    for protocol, (metrics, _, _, pinfo) in results.items():
        for metric in ("ece", "mce", "nll"):
            rows = metric_rows(metrics, metric, models, published)
            caption = (
                f"{metric.upper()} on {dataset} (MAR test, {info['n_eval']} ratings), protocol "
                f"{pinfo['title']}. "
                + ("'(paper)': Kweon et al. 2022, Tables 1/4/5. " if published else "")
                + "The paper's non-parametric rows have no loss; its value is shown on our "
                "naive row."
            )
            paths += write_table(
                out / "tables" / f"{metric}_protocol_{protocol}",
                metric_header(models, published),
                rows,
                caption=caption,
            )
    # summary across protocols: Gaussian-IPS and the best calibrated ECE per model
    rows = []
    for protocol, (metrics, _, _, pinfo) in results.items():
        for model in models:
            cal_keys = [
                _key(model, m, loss)
                for m in NONPARAMETRIC + PARAMETRIC
                for loss in LOSSES
                if _key(model, m, loss) in metrics
            ]
            if not cal_keys:
                continue
            best = min(cal_keys, key=lambda k: metrics[k]["ece"])
            g = metrics.get(_key(model, "Gaussian", "IPS"), {})
            gn = metrics.get(_key(model, "Gaussian", "naive"), {})
            rows.append(
                [
                    protocol,
                    model,
                    gn.get("ece"),
                    g.get("ece"),
                    g.get("nll"),
                    g.get("mean_p"),
                    pinfo["test_base_rate"],
                    metrics[best]["ece"],
                    best.split("__", 1)[1].replace("__", " / "),
                ]
            )
    paths += write_table(
        out / "tables" / "summary",
        [
            "protocol",
            "model",
            "ECE Gaussian naive",
            "ECE Gaussian IPS",
            "NLL Gaussian IPS",
            "mean p Gaussian IPS",
            "test base rate",
            "best ECE",
            "best method / loss",
        ],
        rows,
        caption=f"Summary on {dataset}: the level (mean predicted p) against the MAR test "
        "base rate decides most of the ECE.",
    )
    rows = []
    for protocol, (_, _, _, pinfo) in results.items():
        br = pinfo.get("implied_base_rate", {})
        rows.append(
            [
                protocol,
                pinfo.get("n_calibration_pairs"),
                pinfo.get("n_positives"),
                br.get("naive"),
                br.get(pinfo.get("ips_loss", ""), None),
                pinfo.get("ips_loss", "-"),
                pinfo["test_base_rate"],
                pinfo["mar_base_rate"],
            ]
        )
    paths += write_table(
        out / "tables" / "base_rates",
        [
            "protocol",
            "calibration pairs",
            "positives",
            "implied base rate (naive)",
            "implied base rate (IPS)",
            "IPS loss",
            "test base rate",
            "MAR-sample base rate",
        ],
        rows,
        caption="The base rate a constant calibrator fitted on each protocol's calibration "
        "set inherits (sum w t / sum w), against the MAR truth. Protocol d takes (b)'s fits.",
        digits=4,
    )
    header = ["metric"] + [h for m in models for h in ((m, f"{m} (paper)") if published else (m,))]
    rows = []
    for metric in (*PUBLISHED_COAT_RANKING, "AUC"):
        row: list[Any] = [metric]
        for j, m in enumerate(models):
            row.append(ranking[m][metric])
            if published:
                pub = PUBLISHED_COAT_RANKING.get(metric)
                row.append(pub[j] if pub else None)
        rows.append(row)
    paths += write_table(
        out / "tables" / "ranking",
        header,
        rows,
        caption=f"Ranking quality of the base models on the {dataset} MAR test ratings "
        "(paper's Table 3 for Coat).",
    )
    return paths


# --------------------------------------------------------------------------- figures


def write_figures(
    out: Path, study: Study, scores: dict, results: dict, *, figure_model: str
) -> list[Path]:
    """Figures 1-4 of the paper for ``figure_model`` (the paper draws LightGCN)."""
    from jaxcal.plot import calibration_map, reliability_diagram, score_histograms

    fig_dir = out / "figures"
    paths = []
    ev = study.eval_mask
    y = study.test_label[ev]
    for protocol, (_, preds, fitted, _) in results.items():
        panels = {}
        for method in NONPARAMETRIC:
            k = _key(figure_model, method, "naive")
            if k in preds:
                panels[method] = preds[k]
        for loss in LOSSES:
            for method in ("Platt", "Gaussian", "Gamma"):
                k = _key(figure_model, method, loss)
                if k in preds:
                    panels[f"{method} ({loss})"] = preds[k]
        if panels:
            paths.append(
                reliability_diagram(
                    panels,
                    y,
                    fig_dir / f"fig1_reliability_{protocol}_{figure_model}.png",
                    n_bins=10,
                    symmetric=True,
                    title=f"{figure_model}, protocol {protocol}",
                )
            )
        maps = {
            m: fitted[_key(figure_model, m, "IPS")]
            for m in ("Platt", "Gaussian", "Gamma")
            if _key(figure_model, m, "IPS") in fitted
        }
        s_eval = scores[figure_model][study.test_user, study.test_item][ev]
        if maps:
            lo, hi = float(s_eval.min()), float(s_eval.max())
            paths.append(
                calibration_map(
                    maps,
                    (lo, hi),
                    fig_dir / f"fig3_maps_{protocol}_{figure_model}.png",
                    scores=s_eval,
                    labels=y,
                    reference=(s_eval, y),
                    reference_label="test preference rate (binned)",
                    title=f"IPS-fitted maps, {figure_model}, protocol {protocol}",
                )
            )
        g = fitted.get(_key(figure_model, "Gaussian", "IPS"))
        if g is not None:
            paths.append(case_study(out, study, scores[figure_model], g, protocol, figure_model))
    for model in ("NCF", figure_model):
        s_eval = scores[model][study.test_user, study.test_item][ev]
        paths.append(
            score_histograms(
                s_eval,
                y,
                fig_dir / f"fig2_scores_{model}.png",
                title=f"{model}: test scores by true preference",
            )
        )
    return paths


def case_study(
    out: Path, study: Study, score: np.ndarray, fitted: Any, protocol: str, model: str
) -> Path:
    """Figure 4: three users' top-5 items (not in training) with Gaussian-IPS probabilities:
    the most confident user, the least confident, and the widest spread."""
    from jaxcal.plot._figure import new_figure, save_figure
    from jaxcal.reproduce._tables import write_table

    masked = np.where(study.train + study.valid > 0, -np.inf, score)
    top = np.argsort(-masked, axis=1, kind="stable")[:, :5]
    probs = np.asarray(fitted.predict(np.take_along_axis(score, top, axis=1)))
    mean, spread = probs.mean(1), probs.max(1) - probs.min(1)
    users: list[int] = []
    for criterion in (-mean, mean, -spread):  # three distinct users, even when maps are flat
        order = np.argsort(criterion, kind="stable")
        users.append(int(next(u for u in order if u not in users)))
    rows = [[u, r + 1, int(top[u, r]), float(probs[u, r])] for u in users for r in range(5)]
    write_table(
        out / "tables" / f"case_study_{protocol}",
        ["user", "rank", "item", "P(prefer)"],
        rows,
        caption=f"Top-5 unseen items of three users ({model}, Gaussian calibration with IPS, "
        f"protocol {protocol}).",
    )
    fig = new_figure((7.5, 2.8))
    axes = fig.subplots(1, 3, sharey=True)
    for ax, u, label in zip(
        axes, users, ("most confident", "least confident", "widest"), strict=True
    ):
        ax.bar(np.arange(1, 6), probs[u], color="#4477aa")
        ax.set_ylim(0, 1)
        ax.set_xlabel("rank")
        ax.set_title(f"user {u} ({label})", fontsize=9)
    axes[0].set_ylabel("calibrated P(prefer)")
    return save_figure(fig, out / "figures" / f"fig4_case_study_{protocol}_{model}.png", dpi=110)


# --------------------------------------------------------------------------- driver


def reproduce(
    dataset: str = "coat",
    out: str | Path = "kweon2022-out",
    *,
    protocols: tuple[str, ...] = PROTOCOLS,
    quick: bool = False,
    seed: int = 0,
    yahoo_dir: str | None = None,
    holdout: str = "per_user_last",
    absolute: str = "default",
    figures: bool = True,
    quiet: bool = False,
) -> dict:
    """Run the study and write its tables, figures and predictions under ``out``.

    Enables float64 in JAX (``jax_enable_x64``) for the process: the calibration fits and
    metrics are exact float64 computations, as in the authors' scipy code.

    Args:
        dataset: ``"coat"``, ``"yahoo"`` (needs ``yahoo_dir``) or ``"synthetic"``.
        out: output folder.
        protocols: any of ``"a"``, ``"b"``, ``"c"``, ``"d"`` (``"d"`` also fits ``"b"``).
        quick: tiny models, few steps, Platt and Gaussian calibration only (a smoke run
            of about a minute on Coat).
        seed: seed of the hold-out, negative sampling, MAR split and model training.
        yahoo_dir: folder of the Yahoo!R3 Webscope files.
        holdout: ``"per_user_last"`` (the authors' validation rule) or ``"random"``.
        absolute: protocol c's propensities, ``"default"`` or ``"naive_bayes"`` (see
            :func:`load_study`).
        figures: write the PNG figures (needs matplotlib).
        quiet: no progress lines.

    Returns:
        The ``summary.json`` content (metrics per protocol / model / method / loss).

    Raises:
        ValueError: unknown dataset or protocol, missing Yahoo!R3 path.
    """
    import jax

    jax.config.update("jax_enable_x64", True)  # exact float64 calibration fits
    bad = [p for p in protocols if p not in PROTOCOLS]
    if bad or not protocols:
        raise ValueError(f"protocols must be among {PROTOCOLS}; got {protocols!r}.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    study = load_study(dataset, seed=seed, yahoo_dir=yahoo_dir, holdout=holdout, absolute=absolute)
    log(
        f"kweon2022: {dataset}: {int(study.train.sum())} training / {int(study.valid.sum())} "
        f"validation positives, {study.test_label.size} MAR test ratings",
        quiet=quiet,
    )
    scores = train_models(study, quick=quick, seed=seed, quiet=quiet)
    ranking = ranking_table(study, scores)
    calibrators, notes = available_calibrators(15 if dataset != "yahoo" else 50)
    if quick:  # a smoke run: two parametric calibrators keep the compile time down
        calibrators = {k: v for k, v in calibrators.items() if k in ("Platt", "Gaussian")}
        notes.append("--quick: only Platt and Gaussian calibration are fitted.")
    for n in notes:
        log(f"kweon2022: {n}", quiet=quiet)
    todo = [p for p in PROTOCOLS if p in protocols or (p == "b" and "d" in protocols)]
    results: dict[str, tuple] = {}
    for protocol in todo:
        fitted_b = results["b"][2] if protocol == "d" else None
        results[protocol] = run_protocol(
            study, protocol, scores, calibrators, seed=seed, fitted_b=fitted_b, quiet=quiet
        )
    results = {p: r for p, r in results.items() if p in protocols}
    ratios = (N_NEGATIVES_AUTHORS,) if quick else (1, 2, 4, 8, 16, N_NEGATIVES_AUTHORS)
    sweep = ratio_sweep(study, scores, calibrators, ratios, seed=seed, quiet=quiet)
    info = {
        "test_base_rate": float(study.test_label[study.eval_mask].mean()),
        "dataset": dataset,
        "quick": quick,
        "seed": seed,
        "n_eval": int(study.eval_mask.sum()),
        "n_mar": int(study.mar.sum()),
        "absolute_propensities": study.absolute_source,
        "holdout": holdout,
        "skipped": notes,
    }
    for protocol, (_, preds, _, _) in results.items():
        np.savez_compressed(
            out / f"predictions_{protocol}.npz",
            labels=study.test_label[study.eval_mask],
            **preds,
        )
    np.savez_compressed(
        out / "scores.npz",
        test_user=study.test_user,
        test_item=study.test_item,
        test_label=study.test_label,
        mar=study.mar,
        **{m: s[study.test_user, study.test_item] for m, s in scores.items()},
    )
    write_tables(out, dataset, results, ranking, info, sweep)
    if figures:
        write_figures(out, study, scores, results, figure_model="LightGCN")
    summary = {
        **info,
        "ranking": ranking,
        "negative_ratio": sweep,
        "protocols": {p: {"info": r[3], "metrics": r[0]} for p, r in results.items()},
        "seconds": time.perf_counter() - t0,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    log(f"kweon2022: wrote {out} [{summary['seconds']:.1f}s]", quiet=quiet)
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``jaxcal reproduce kweon2022``."""
    parser.add_argument("--dataset", choices=("coat", "yahoo", "synthetic"), default="coat")
    parser.add_argument("--yahoo-dir", default=None, help="folder of the Yahoo!R3 files")
    parser.add_argument("--out", default="kweon2022-out", help="output folder")
    parser.add_argument(
        "--protocol", choices=(*PROTOCOLS, "all"), default="all", help="see docs/reproduction"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny models, Platt and Gaussian only: a smoke run"
    )
    parser.add_argument(
        "--holdout",
        choices=("per_user_last", "random"),
        default="per_user_last",
        help="validation hold-out: the authors' deterministic rule or a random 10%%",
    )
    parser.add_argument(
        "--absolute",
        choices=("default", "naive_bayes"),
        default="default",
        help="protocol c's propensities (default: Coat's published matrix)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``jaxcal reproduce kweon2022``."""
    protocols = PROTOCOLS if args.protocol == "all" else (args.protocol,)
    reproduce(
        args.dataset,
        args.out,
        protocols=protocols,
        quick=args.quick,
        seed=args.seed,
        yahoo_dir=args.yahoo_dir,
        holdout=args.holdout,
        absolute=args.absolute,
        figures=not args.no_figures,
        quiet=args.quiet,
    )
    return 0
