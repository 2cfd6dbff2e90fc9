"""``python -m rslkit.rewards train | eval | relabel`` (see :mod:`rslkit.cli.rewards`)."""

import sys

from rslkit.cli.common import run_cli
from rslkit.cli.rewards import main

if __name__ == "__main__":
    run_cli(lambda: main(sys.argv[1:]))
