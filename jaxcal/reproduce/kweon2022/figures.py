"""The paper's Figures 1-4 (PNG under ``figures/``): reliability diagrams, test-score
histograms, fitted calibration maps and a top-5 case study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from jaxcal.plot import calibration_map, reliability_diagram, score_histograms
from jaxcal.plot._figure import new_figure, save_figure
from jaxcal.reproduce.kweon2022.fitting import result_key
from jaxcal.reproduce.kweon2022.protocol import LOSSES, NONPARAMETRIC, Study
from jaxcal.reproduce.kweon2022.tables import write_case_study_table

__all__ = ["write_figures", "case_study"]


def _reliability(
    fig_dir: Path, preds: dict, y: np.ndarray, protocol: str, model: str
) -> Path | None:
    """Figure 1: reliability diagrams of the non-parametric (naive) and the Platt, Gaussian
    and Gamma (naive and IPS) calibrations of ``model``; None if none was fitted."""
    panels = {}
    for method in NONPARAMETRIC:
        k = result_key(model, method, "naive")
        if k in preds:
            panels[method] = preds[k]
    for loss in LOSSES:
        for method in ("Platt", "Gaussian", "Gamma"):
            k = result_key(model, method, loss)
            if k in preds:
                panels[f"{method} ({loss})"] = preds[k]
    if not panels:
        return None
    return reliability_diagram(
        panels,
        y,
        fig_dir / f"fig1_reliability_{protocol}_{model}.png",
        n_bins=10,
        symmetric=True,
        title=f"{model}, protocol {protocol}",
    )


def _maps(
    fig_dir: Path, fitted: dict, s_eval: np.ndarray, y: np.ndarray, protocol: str, model: str
) -> Path | None:
    """Figure 3: the IPS-fitted Platt, Gaussian and Gamma maps of ``model`` over its test
    scores; None if none was fitted."""
    maps = {
        m: fitted[result_key(model, m, "IPS")]
        for m in ("Platt", "Gaussian", "Gamma")
        if result_key(model, m, "IPS") in fitted
    }
    if not maps:
        return None
    lo, hi = float(s_eval.min()), float(s_eval.max())
    return calibration_map(
        maps,
        (lo, hi),
        fig_dir / f"fig3_maps_{protocol}_{model}.png",
        scores=s_eval,
        labels=y,
        reference=(s_eval, y),
        reference_label="test preference rate (binned)",
        title=f"IPS-fitted maps, {model}, protocol {protocol}",
    )


def write_figures(
    out: Path, study: Study, scores: dict, results: dict, *, figure_model: str
) -> list[Path]:
    """Figures 1-4 of the paper for ``figure_model`` (the paper draws LightGCN)."""
    fig_dir = out / "figures"
    paths = []
    ev = study.eval_mask
    y = study.test_label[ev]
    for protocol, (_, preds, fitted, _) in results.items():
        s_eval = scores[figure_model][study.test_user, study.test_item][ev]
        for path in (
            _reliability(fig_dir, preds, y, protocol, figure_model),
            _maps(fig_dir, fitted, s_eval, y, protocol, figure_model),
        ):
            if path is not None:
                paths.append(path)
        g = fitted.get(result_key(figure_model, "Gaussian", "IPS"))
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


def _case_study_users(study: Any, score: np.ndarray, fitted: Any) -> tuple:
    """Each user's top-5 items not seen in training or validation, their calibrated
    probabilities, and three distinct users: the most confident (highest mean), the least
    confident and the widest spread. Returns (users, top ``[U, 5]``, probs ``[U, 5]``)."""
    masked = np.where(study.train + study.valid > 0, -np.inf, score)
    top = np.argsort(-masked, axis=1, kind="stable")[:, :5]
    probs = np.asarray(fitted.predict(np.take_along_axis(score, top, axis=1)))
    mean, spread = probs.mean(1), probs.max(1) - probs.min(1)
    users: list[int] = []
    for criterion in (-mean, mean, -spread):  # three distinct users, even when maps are flat
        order = np.argsort(criterion, kind="stable")
        users.append(int(next(u for u in order if u not in users)))
    return users, top, probs


def case_study(
    out: Path, study: Study, score: np.ndarray, fitted: Any, protocol: str, model: str
) -> Path:
    """Figure 4: three users' top-5 items (not in training) with Gaussian-IPS probabilities:
    the most confident user, the least confident, and the widest spread."""
    users, top, probs = _case_study_users(study, score, fitted)
    write_case_study_table(out, users, top, probs, protocol, model)
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
