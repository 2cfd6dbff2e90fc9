"""Command-line entry points (``train.py``, ``play.py``)."""
