"""Reproduce Kweon, Kang & Yu (AAAI 2022) on Coat under the four protocols of
docs/reproduction-kweon2022.md (same as ``jaxcal reproduce kweon2022``).

    python experiments/kweon2022.py --out kweon2022-out            # authors' hold-out
    python experiments/kweon2022.py --out kweon2022-random --holdout random
"""

from __future__ import annotations

import argparse
import sys

from jaxcal.reproduce import kweon2022


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kweon2022.add_arguments(parser)
    return kweon2022.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
