"""Reward-model tests. Those that open sockets (the served critic against a fake server on loopback) run only inside
a private network namespace, where loopback is the only interface:

    unshare -n sh -c '.venv/bin/python tests/ros2/lo_up.py && RSLKIT_NETNS_TESTS=1 .venv/bin/python -m pytest -q \
        tests/rewards'

(as ``make test-realworld`` does for the transport). With RSLKIT_NETNS_TESTS=1 set, a namespace that has other
interfaces is an error, so traffic can never leave the machine. Tests that open no socket run everywhere.
"""

from __future__ import annotations

import pytest

from tests.netns import NETNS, require_loopback_only

require_loopback_only(
    "run the socket tests of tests/rewards under `unshare -n` with only loopback (`make test-realworld`)"
)


@pytest.fixture
def netns() -> None:
    """Skip the test unless it runs inside a private network namespace (RSLKIT_NETNS_TESTS=1)."""
    if not NETNS:
        pytest.skip("opens sockets: runs only inside a private network namespace with RSLKIT_NETNS_TESTS=1")
