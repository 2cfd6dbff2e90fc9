"""Inference delay estimate, in control ticks, from measured latencies (a high quantile, warm-up excluded)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np


class LatencyEstimator:
    """Keeps the last ``window`` latencies after ``warmup`` samples and estimates the delay as their ``quantile``.

    Args:
        initial_s: estimate used until ``min_samples`` post-warm-up latencies were measured.
        warmup: first samples ignored (session start, allocator and cache warm-up).
        quantile: e.g. 0.95 (p95): a chunk arrives in time in ~95 % of requests.
        window: samples kept (the estimate follows drifting load).
        min_samples: post-warm-up samples needed before measuring replaces ``initial_s``.
    """

    def __init__(
        self, initial_s: float, warmup: int = 3, quantile: float = 0.95, window: int = 100, min_samples: int = 3
    ) -> None:
        if initial_s < 0 or warmup < 0 or not 0 < quantile <= 1 or window < 1 or min_samples < 1:
            raise ValueError(
                "Need initial_s >= 0, warmup >= 0, 0 < quantile <= 1, window >= 1, min_samples >= 1; got "
                f"{initial_s}, {warmup}, {quantile}, {window}, {min_samples}."
            )
        self.initial_s, self.warmup, self.quantile, self.min_samples = initial_s, warmup, quantile, min_samples
        self.samples: deque[float] = deque(maxlen=window)
        self.seen = 0

    def record(self, latency_s: float) -> None:
        """Add one measured request latency in seconds (non-finite or negative values are rejected)."""
        if not math.isfinite(latency_s) or latency_s < 0:
            raise ValueError(f"Latency must be a finite number of seconds >= 0, got {latency_s}.")
        self.seen += 1
        if self.seen > self.warmup:
            self.samples.append(latency_s)

    def estimate_s(self) -> float:
        """Current latency estimate in seconds."""
        if len(self.samples) < self.min_samples:
            return self.initial_s
        return float(np.quantile(np.asarray(self.samples), self.quantile))

    def delay_ticks(self, period_s: float) -> int:
        """Ticks from request to the first tick that can use the result: ``max(1, ceil(estimate / period))``."""
        return max(1, math.ceil(self.estimate_s() / period_s - 1e-9))
