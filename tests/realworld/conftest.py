"""Real-world loop tests. Those that open sockets (the gRPC transport) run only inside a private network namespace,
where loopback is the only interface: `make test-realworld` makes one (`unshare -n`) and sets RSLKIT_NETNS_TESTS=1.
With that variable set, a namespace that has other interfaces is an error, so traffic can never leave the machine.
"""

from __future__ import annotations

from tests.netns import require_loopback_only

require_loopback_only("run the transport tests with `make test-realworld`, which runs them under `unshare -n`")
