"""``python -m rslkit.export --checkpoint C --out policy.onnx`` (see :mod:`rslkit.cli.export`)."""

import sys

from rslkit.cli.common import run_cli
from rslkit.cli.export import main

if __name__ == "__main__":
    run_cli(lambda: main(sys.argv[1:]))
