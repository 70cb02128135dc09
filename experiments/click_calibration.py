"""Borisov et al. (CIKM 2018), Tables 1-3: per-rank isotonic calibration of click models.

Trains CCM, DBN, DCM and UBM under 24 Beta priors on the TianGong-ST demo log and on a
simulated log, and reports average test perplexity before / after calibration and its
variance across priors; writes reliability diagrams. Same as ``jaxcal reproduce borisov2018``.

    python experiments/click_calibration.py --out results/borisov2018 [--sim-sessions 1000000]
"""

from __future__ import annotations

import argparse
import sys

from jaxcal.reproduce import borisov2018

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    borisov2018.add_arguments(parser)
    sys.exit(borisov2018.run(parser.parse_args()))
