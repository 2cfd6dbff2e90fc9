"""``python -m rslkit.realworld learner | actor | local`` (see :mod:`rslkit.cli.realworld`)."""

import sys

from rslkit.cli.common import run_cli
from rslkit.cli.realworld import main

if __name__ == "__main__":
    run_cli(lambda: main(sys.argv[1:]))
