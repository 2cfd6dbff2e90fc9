"""Train a policy: ``python train.py --task pendulum`` (``--help`` lists tasks and options)."""

from rslkit.cli.common import run_cli
from rslkit.cli.train import main

if __name__ == "__main__":
    run_cli(main)
