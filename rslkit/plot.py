"""``python -m rslkit.plot RUN_DIR [RUN_DIR ...] [--out PNG]`` (see :mod:`rslkit.cli.plot`)."""

import sys

from rslkit.cli.plot import run

if __name__ == "__main__":
    run(sys.argv[1:])
