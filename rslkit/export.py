"""``python -m rslkit.export --checkpoint C --out policy.onnx`` (see :mod:`rslkit.deploy.export`)."""

import sys

from rslkit.deploy.export import main

if __name__ == "__main__":
    main(sys.argv[1:])
