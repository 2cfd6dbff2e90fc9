"""Evaluate a trained policy: ``python play.py --task pendulum --checkpoint logs/pendulum/<run>/model_100.pt``."""

from rslkit.cli.common import run_cli
from rslkit.cli.play import main

if __name__ == "__main__":
    run_cli(main)
