"""Keep freed heap memory in the process instead of returning it to the OS after every training step.

glibc's ``malloc`` serves blocks above a dynamic threshold (128 KiB at start) with a fresh ``mmap`` and unmaps them
on ``free``. A PPO update allocates and frees megabyte-sized activations and gradients thousands of times per
iteration, so each of them is page-faulted and zeroed by the kernel again: tens of thousands of minor page faults
per iteration of 64-64 PPO at 4096 envs; removing them makes that PPO faster (docs/benchmarks.md, section 1).
Raising the mmap and trim thresholds (:func:`tune_cpu_allocator`, when a runner's ``learn()`` starts) lets
``malloc`` reuse the memory, and one arena for all threads
(:func:`share_one_malloc_arena`: at the start of ``train.py``, before torch starts its OpenMP threads, and again
when ``learn()`` starts) keeps them off per-thread heaps, which glibc shrinks (and so page-faults again) on its own
schedule. Both are process-wide, so nothing happens at import: a program that imports rslkit keeps its malloc
settings until it trains. Threads that allocated before that call keep their
arenas; ``MALLOC_ARENA_MAX=1`` set before the process starts covers them too. Peak RSS does not grow, but memory
freed at the end of a phase is kept until the process exits.

``RSLKIT_MALLOC_TUNING=0`` in the environment turns this off. Nothing happens off glibc (macOS, Windows, musl).
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 256 * 1024 * 1024
"""Blocks below this come from the heap and are reused after ``free``."""
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
"""Free memory at the top of the heap that ``free`` keeps instead of returning to the OS."""

_state: dict[str, bool | None] = {"applied": None, "arena": None}


def share_one_malloc_arena() -> bool:
    """Make threads that allocate for the first time from now on share glibc's main arena (``M_ARENA_MAX=1``).

    Called by ``train.py`` before anything else (before torch starts its OpenMP threads) and when a runner's
    ``learn()`` starts (a script that calls ``learn()`` directly): a thread that takes an
    arena of its own gets per-thread heaps, which glibc unmaps and maps again as they empty and fill, and a thread
    started after other threads' arenas exist may be handed one of those (whichever arena is not locked at that
    moment). Set only at ``learn()`` after OpenMP threads had run, it left tens of thousands of minor page faults per
    512-env PPO iteration with ``parallel_update``; set before any parallel torch work, a few hundred.

    Returns:
        True when in effect (see :func:`tune_cpu_allocator` for when it is not).
    """
    if _state["arena"] is None:
        libc = _glibc()
        _state["arena"] = libc is not None and bool(libc.mallopt(_M_ARENA_MAX, 1))
    return bool(_state["arena"])


def tune_cpu_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds once per process (see the module docstring).

    Returns:
        True when the thresholds are in effect, False when turned off, not on glibc, or refused by ``mallopt``.
    """
    if _state["applied"] is not None:
        return bool(_state["applied"])
    _state["applied"] = _apply()
    return bool(_state["applied"])


def _glibc() -> ctypes.CDLL | None:
    """glibc, or None when tuning is off (``RSLKIT_MALLOC_TUNING=0``) or this is not glibc."""
    if os.environ.get("RSLKIT_MALLOC_TUNING", "1") == "0":
        return None
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _apply() -> bool:
    libc = _glibc()
    if libc is None:
        log.info("malloc thresholds left at the C library's defaults (RSLKIT_MALLOC_TUNING=0, or not glibc).")
        return False
    ok = all(
        libc.mallopt(option, value)
        for option, value in (
            (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
            (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
            (_M_ARENA_MAX, 1),
        )
    )
    if not ok:
        log.warning("glibc refused the malloc thresholds (mallopt returned 0); training runs, ~10 % slower on CPU.")
    return ok
