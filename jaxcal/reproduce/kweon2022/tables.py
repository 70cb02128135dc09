"""The tables (markdown + CSV under ``tables/``): the paper's Tables 1, 4, 5 per protocol
with the published Coat numbers next to ours, its Table 3 (ranking), and the summary,
base-rate, negative-ratio and case-study tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from jaxcal.reproduce._tables import write_table
from jaxcal.reproduce.kweon2022.fitting import result_key
from jaxcal.reproduce.kweon2022.protocol import (
    LOSSES,
    METHODS,
    MODELS,
    NONPARAMETRIC,
    PARAMETRIC,
    UNCALIBRATED,
)
from jaxcal.reproduce.kweon2022.published import PUBLISHED_COAT, PUBLISHED_COAT_RANKING

__all__ = [
    "metric_rows",
    "metric_header",
    "write_negative_ratio_table",
    "write_metric_tables",
    "write_summary_table",
    "write_base_rate_table",
    "write_ranking_table",
    "write_case_study_table",
    "write_tables",
]


# --------------------------------------------------------------------------- metric tables


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
        keys = [result_key(m, method, loss) for m in models]
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
    """Header of one metric table: type, method, loss, then per model ours (and paper)."""
    header = ["type", "method", "loss"]
    for m in models:
        header += [m, f"{m} (paper)"] if published else [m]
    return header


def write_metric_tables(
    out: Path, dataset: str, results: dict, n_eval: int, *, published: bool
) -> list[Path]:
    """``{ece,mce,nll}_protocol_<p>``: the paper's Tables 1, 4 and 5 for each protocol."""
    paths: list[Path] = []
    for protocol, (metrics, _, _, pinfo) in results.items():
        for metric in ("ece", "mce", "nll"):
            rows = metric_rows(metrics, metric, MODELS, published)
            caption = (
                f"{metric.upper()} on {dataset} (MAR test, {n_eval} ratings), protocol "
                f"{pinfo['title']}. "
                + ("'(paper)': Kweon et al. 2022, Tables 1/4/5. " if published else "")
                + "The paper's non-parametric rows have no loss; its value is shown on our "
                "naive row."
            )
            paths += write_table(
                out / "tables" / f"{metric}_protocol_{protocol}",
                metric_header(MODELS, published),
                rows,
                caption=caption,
            )
    return paths


# --------------------------------------------------------------------------- other tables


def write_negative_ratio_table(
    out: Path, dataset: str, sweep: list, test_base_rate: float
) -> list[Path]:
    """``negative_ratio``: the level and ECE of Gaussian calibration per negative ratio."""
    return list(
        write_table(
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
            f"{test_base_rate:.4f}.",
        )
    )


def _summary_rows(results: dict) -> list[list[Any]]:
    """Per protocol and model: Gaussian's naive and IPS results and the best ECE."""
    rows = []
    for protocol, (metrics, _, _, pinfo) in results.items():
        for model in MODELS:
            cal_keys = [
                result_key(model, m, loss)
                for m in NONPARAMETRIC + PARAMETRIC
                for loss in LOSSES
                if result_key(model, m, loss) in metrics
            ]
            if not cal_keys:
                continue
            best = min(cal_keys, key=lambda k: metrics[k]["ece"])
            g = metrics.get(result_key(model, "Gaussian", "IPS"), {})
            gn = metrics.get(result_key(model, "Gaussian", "naive"), {})
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
    return rows


def write_summary_table(out: Path, dataset: str, results: dict) -> list[Path]:
    """``summary``: Gaussian-IPS and the best calibrated ECE per protocol and model."""
    return list(
        write_table(
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
            _summary_rows(results),
            caption=f"Summary on {dataset}: the level (mean predicted p) against the MAR test "
            "base rate decides most of the ECE.",
        )
    )


def write_base_rate_table(out: Path, results: dict) -> list[Path]:
    """``base_rates``: the base rate each protocol's calibration set implies."""
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
    return list(
        write_table(
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
            "set inherits (sum w t / sum w), against the MAR truth. Protocol d takes (b)'s "
            "fits.",
            digits=4,
        )
    )


def write_ranking_table(out: Path, dataset: str, ranking: dict, *, published: bool) -> list[Path]:
    """``ranking``: the base models' ranking quality (the paper's Table 3)."""
    header = ["metric"] + [h for m in MODELS for h in ((m, f"{m} (paper)") if published else (m,))]
    rows = []
    for metric in (*PUBLISHED_COAT_RANKING, "AUC"):
        row: list[Any] = [metric]
        for j, m in enumerate(MODELS):
            row.append(ranking[m][metric])
            if published:
                pub = PUBLISHED_COAT_RANKING.get(metric)
                row.append(pub[j] if pub else None)
        rows.append(row)
    return list(
        write_table(
            out / "tables" / "ranking",
            header,
            rows,
            caption=f"Ranking quality of the base models on the {dataset} MAR test ratings "
            "(paper's Table 3 for Coat).",
        )
    )


def write_case_study_table(
    out: Path,
    users: list[int],
    top: np.ndarray,
    probs: np.ndarray,
    protocol: str,
    model: str,
) -> list[Path]:
    """``case_study_<protocol>``: the top-5 unseen items of the case-study users with their
    Gaussian-IPS probabilities (``top`` and ``probs``: ``[U, 5]``)."""
    rows = [[u, r + 1, int(top[u, r]), float(probs[u, r])] for u in users for r in range(5)]
    return list(
        write_table(
            out / "tables" / f"case_study_{protocol}",
            ["user", "rank", "item", "P(prefer)"],
            rows,
            caption=f"Top-5 unseen items of three users ({model}, Gaussian calibration with "
            f"IPS, protocol {protocol}).",
        )
    )


# --------------------------------------------------------------------------- driver


def write_tables(
    out: Path, dataset: str, results: dict, ranking: dict, info: dict, sweep: list
) -> list[Path]:
    """Write every table of the study (not the case studies, written with Figure 4) under
    ``out / "tables"``; return the paths (markdown and CSV)."""
    published = dataset == "coat"
    paths = []
    if sweep:
        paths += write_negative_ratio_table(out, dataset, sweep, info["test_base_rate"])
    paths += write_metric_tables(out, dataset, results, info["n_eval"], published=published)
    paths += write_summary_table(out, dataset, results)
    paths += write_base_rate_table(out, results)
    paths += write_ranking_table(out, dataset, ranking, published=published)
    return paths
