"""Socket tests run only inside a private network namespace where loopback is the only interface.

``make test-realworld`` makes one (``unshare -n``, ``lo`` up) and sets ``RSLKIT_NETNS_TESTS=1``. With that variable
set, a namespace that has other interfaces is an error, so traffic can never leave the machine.
"""

from __future__ import annotations

import os
import socket

NETNS = os.environ.get("RSLKIT_NETNS_TESTS") == "1"


def require_loopback_only(hint: str) -> None:
    """With ``RSLKIT_NETNS_TESTS=1``, raise unless loopback is the only interface (``hint``: how to run them)."""
    if not NETNS:
        return
    interfaces = {name for _, name in socket.if_nameindex()}
    if interfaces != {"lo"}:
        raise RuntimeError(
            f"RSLKIT_NETNS_TESTS=1 but this network namespace has interfaces {sorted(interfaces)}: {hint}."
        )
