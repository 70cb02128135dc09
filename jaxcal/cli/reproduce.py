"""``jaxcal reproduce STUDY``: re-run a published study (see docs/reproduction.md)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util

# study name -> module exposing add_arguments(parser) and run(args) -> int
STUDIES = {
    "kweon2022": "jaxcal.reproduce.kweon2022",
    "borisov2018": "jaxcal.reproduce.borisov2018",
    "hiranandani2019": "jaxcal.reproduce.hiranandani2019",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="reproduce a published study's tables and figures",
        description="Reproduce a published calibration study; writes tables and PNGs.",
    )
    studies = parser.add_subparsers(dest="study", metavar="STUDY", required=True)
    for name, module_name in STUDIES.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        study = studies.add_parser(name, help=(module.__doc__ or name).strip().splitlines()[0])
        module.add_arguments(study)
        study.set_defaults(func=module.run)
