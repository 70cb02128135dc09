r"""Kweon, Kang & Yu (AAAI 2022), "Obtaining Calibrated Probabilities with Personalized
Ranking Models": the calibration study on Coat / Yahoo!R3 / a simulator, under four
protocols that make the base rate of the calibration set explicit.

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

Modules: ``protocol`` (models, calibrators, data split, calibration sets), ``published``
(the paper's Coat numbers), ``fitting`` (base models, calibrators, metrics per protocol),
``tables`` and ``figures`` (the outputs), ``pipeline`` (:func:`reproduce`, the whole run).
This package's :func:`add_arguments` and :func:`run` are ``jaxcal reproduce kweon2022``.
"""

from __future__ import annotations

import argparse

# Every public name of the former single module stays importable from here; the names
# outside ``__all__`` are re-exported explicitly (``name as name``) without widening it.
from jaxcal.reproduce.kweon2022.figures import case_study as case_study
from jaxcal.reproduce.kweon2022.figures import write_figures as write_figures
from jaxcal.reproduce.kweon2022.fitting import available_calibrators as available_calibrators
from jaxcal.reproduce.kweon2022.fitting import evaluate as evaluate
from jaxcal.reproduce.kweon2022.fitting import model_specs as model_specs
from jaxcal.reproduce.kweon2022.fitting import ranking_table as ranking_table
from jaxcal.reproduce.kweon2022.fitting import ratio_sweep as ratio_sweep
from jaxcal.reproduce.kweon2022.fitting import run_protocol as run_protocol
from jaxcal.reproduce.kweon2022.fitting import train_models as train_models
from jaxcal.reproduce.kweon2022.pipeline import reproduce
from jaxcal.reproduce.kweon2022.protocol import HOLDOUT_FRACTION as HOLDOUT_FRACTION
from jaxcal.reproduce.kweon2022.protocol import LOSSES as LOSSES
from jaxcal.reproduce.kweon2022.protocol import MAR_FRACTION as MAR_FRACTION
from jaxcal.reproduce.kweon2022.protocol import METHODS, MODELS, PROTOCOLS
from jaxcal.reproduce.kweon2022.protocol import N_NEGATIVES_AUTHORS as N_NEGATIVES_AUTHORS
from jaxcal.reproduce.kweon2022.protocol import NONPARAMETRIC as NONPARAMETRIC
from jaxcal.reproduce.kweon2022.protocol import PARAMETRIC as PARAMETRIC
from jaxcal.reproduce.kweon2022.protocol import PROTOCOL_TITLES as PROTOCOL_TITLES
from jaxcal.reproduce.kweon2022.protocol import UNCALIBRATED as UNCALIBRATED
from jaxcal.reproduce.kweon2022.protocol import CalSet as CalSet
from jaxcal.reproduce.kweon2022.protocol import Study as Study
from jaxcal.reproduce.kweon2022.protocol import calibration_set as calibration_set
from jaxcal.reproduce.kweon2022.protocol import load_study as load_study
from jaxcal.reproduce.kweon2022.published import PUBLISHED_COAT
from jaxcal.reproduce.kweon2022.published import PUBLISHED_COAT_RANKING as PUBLISHED_COAT_RANKING
from jaxcal.reproduce.kweon2022.tables import metric_header as metric_header
from jaxcal.reproduce.kweon2022.tables import metric_rows as metric_rows
from jaxcal.reproduce.kweon2022.tables import write_tables as write_tables

__all__ = ["add_arguments", "run", "reproduce", "PUBLISHED_COAT", "MODELS", "METHODS"]


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
    # the options whose command-line names are reproduce()'s
    same = {name: getattr(args, name) for name in ("quick", "seed", "yahoo_dir", "holdout")}
    reproduce(
        args.dataset,
        args.out,
        protocols=protocols,
        absolute=args.absolute,
        figures=not args.no_figures,
        quiet=args.quiet,
        **same,
    )
    return 0
