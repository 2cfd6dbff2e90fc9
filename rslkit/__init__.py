"""rslkit: a compact PyTorch library for robot learning."""

__version__ = "0.1.0"
