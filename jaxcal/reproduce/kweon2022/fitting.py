"""The computation: the five base models trained on the training positives, their ranking
quality, and every calibrator fitted per protocol and loss, evaluated on the MAR test
ratings; and the negative-ratio sweep."""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax
import numpy as np

import jaxcal.calibrators as cal_module
from jaxcal._progress import log
from jaxcal.data import calibration_pairs
from jaxcal.debias import popularity_propensity, prior_shift_correction
from jaxcal.metrics import ece, mce, nll
from jaxcal.metrics.ranking import auc, ndcg_at_k, recall_at_k
from jaxcal.recsys import BPRMF, CML, NCF, UBPR, LightGCN
from jaxcal.reproduce.kweon2022.protocol import (
    LOSSES,
    PROTOCOL_TITLES,
    CalSet,
    Study,
    calibration_set,
)

__all__ = [
    "model_specs",
    "train_models",
    "ranking_table",
    "available_calibrators",
    "evaluate",
    "result_key",
    "run_protocol",
    "ratio_sweep",
]


# --------------------------------------------------------------------------- base models


def model_specs(*, quick: bool) -> dict[str, Any]:
    """The five base models with the paper's hyperparameters (Appendix E): 128 factors (NCF
    64), batch 512, learning rate 0.001, weight decay 0.001, one negative per positive."""
    steps = 150 if quick else 3000
    rank = 16 if quick else 128
    common = dict(learning_rate=0.001 if not quick else 0.01, n_steps=steps, batch_size=512)
    return {
        "BPR": BPRMF(rank=rank, l2=0.001, **common),
        "NCF": NCF(rank=rank // 2, hidden=(rank, rank // 2), n_negatives=1, l2=0.001, **common),
        "CML": CML(rank=rank, margin=0.5, **common),
        "UBPR": UBPR(rank=rank, l2=0.001, **common),
        "LightGCN": LightGCN(rank=rank, l2=0.001, n_layers=2, **common),
    }


def train_models(study: Study, *, quick: bool, seed: int, quiet: bool) -> dict[str, np.ndarray]:
    """Train the five models; return each one's ``[U, I]`` score matrix (float64)."""
    scores = {}
    pop = popularity_propensity(study.train.sum(0))
    for k, (name, model) in enumerate(model_specs(quick=quick).items()):
        start = time.perf_counter()
        kw = {"propensity": pop} if name == "UBPR" else {}
        fitted = model.fit(study.train, key=jax.random.key(seed + k), **kw)
        scores[name] = np.asarray(fitted.predict_all(), np.float64)
        log(f"kweon2022: trained {name} [{time.perf_counter() - start:.1f}s]", quiet=quiet)
    return scores


def ranking_table(study: Study, scores: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """NDCG@k / Recall@k (k = 1, 3, 5) and AUC on the MAR test ratings (Table 3)."""
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
            cls = getattr(cal_module, cls_name)
        except (ImportError, AttributeError) as exc:
            notes.append(f"{name} skipped: jaxcal.calibrators.{cls_name} not importable ({exc}).")
            continue
        try:
            est = cls(**kwargs)
        except TypeError:
            est = cls()
        out[name] = (est, sig)
    return out, notes


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


def evaluate(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """ECE and MCE with 15 equal-width bins (MCE ignores bins with < 0.01% of the samples,
    as the authors' code), NLL = mean binary cross-entropy."""
    return {
        "ece": float(ece(probs, labels, n_bins=15)),
        "mce": float(mce(probs, labels, n_bins=15, min_fraction=1e-4)),
        "nll": float(nll(probs, labels)),
    }


def result_key(model: str, method: str, loss: str) -> str:
    """The name of one result (``model__method__loss``; ``none`` for no loss): the key of
    the metrics, predictions and fitted calibrators."""
    return f"{model}__{method}__{loss or 'none'}"


# --------------------------------------------------------------------------- one protocol


def _protocol_info(study: Study, protocol: str, cal: CalSet | None) -> dict[str, Any]:
    """The protocol's title, calibration-set size and implied base rates (none for d), and
    the base rates of the test ratings and of the MAR sample."""
    info: dict[str, Any] = {"title": PROTOCOL_TITLES[protocol]}
    if cal is not None:
        info.update(
            n_calibration_pairs=int(cal.labels.size),
            n_positives=int(cal.labels.sum()),
            ips_loss=cal.ips_loss,
            implied_base_rate={k: float(v) for k, v in cal.base_rate.items()},
        )
    info["test_base_rate"] = float(study.test_label[study.eval_mask].mean())
    info["mar_base_rate"] = float(study.test_label[study.mar].mean())
    return info


def _uncalibrated(model: str, s_eval: np.ndarray) -> dict[str, np.ndarray]:
    """The two uncalibrated baselines: min-max rescaled and sigmoid scores."""
    lo, hi = s_eval.min(), s_eval.max()
    return {
        result_key(model, "MinMax", ""): (s_eval - lo) / max(hi - lo, 1e-300),
        result_key(model, "Sigmoid", ""): _sigmoid_input(s_eval),
    }


def _calibrate(
    study: Study,
    s_all: np.ndarray,
    est: Any,
    sig: bool,
    loss_name: str,
    *,
    cal: CalSet | None,
    base: Any,
) -> tuple[Any, str | None]:
    """One calibrator for one model and loss: fitted on the calibration set ``cal``, or,
    when ``cal`` is None (protocol d), ``base`` (protocol b's fit, None when it failed)
    with its level shifted on the MAR sample. Returns (fitted or None, note or None)."""
    if cal is None:
        if base is None:
            return None, None
        s_mar = s_all[study.test_user, study.test_item][study.mar]
        x_mar = _sigmoid_input(s_mar) if sig else s_mar
        try:
            return prior_shift_correction(base, x_mar, study.test_label[study.mar]), None
        except ValueError as exc:
            return None, f"correction failed: {exc}"
    s_cal = s_all[cal.user, cal.item]
    x_cal = _sigmoid_input(s_cal) if sig else s_cal
    # The naive loss is the IPS loss with every propensity 1 (t = Y, w = 1 under "ips" and
    # "ips_positive"), exactly; fitting it that way reuses the compiled IPS fit instead of
    # compiling a second one.
    omega = np.ones_like(cal.propensity) if loss_name == "naive" else cal.propensity
    return _fit(est, x_cal, cal.labels, propensity=omega, loss=cal.ips_loss)


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
    ev = study.eval_mask
    y_eval = study.test_label[ev]
    preds: dict[str, np.ndarray] = {}
    fitted_all: dict[str, Any] = {}
    notes: dict[str, str] = {}
    cal = calibration_set(study, protocol, seed=seed) if protocol != "d" else None
    info = _protocol_info(study, protocol, cal)
    for model, s_all in scores.items():
        start = time.perf_counter()
        s_eval = s_all[study.test_user, study.test_item][ev]
        preds.update(_uncalibrated(model, s_eval))
        for method, (est, sig) in calibrators.items():
            x_eval = _sigmoid_input(s_eval) if sig else s_eval
            for loss_name in LOSSES:
                key = result_key(model, method, loss_name)
                base = (fitted_b or {}).get(key)
                fitted, note = _calibrate(study, s_all, est, sig, loss_name, cal=cal, base=base)
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
    metrics = {key: {**evaluate(p, y_eval), "mean_p": float(p.mean())} for key, p in preds.items()}
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
    if "Gaussian" not in calibrators:
        return []
    est = calibrators["Gaussian"][0]
    relative = popularity_propensity(study.train.sum(0))
    ev = study.eval_mask
    y = study.test_label[ev]
    rows = []
    for r in ratios:
        cp = calibration_pairs(
            study.valid, study.train, n_negatives=r, key=jax.random.key(seed), propensity=relative
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
