"""A learner process for the kill tests: serves 127.0.0.1:PORT into a FileSink at STORE, prints "ready PORT", and
exits by itself after LIFETIME seconds (the tests kill it long before).

    python learner_proc.py PORT STORE LIFETIME
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: transport_helpers imports tests.link

from transport_helpers import FileSink, serve  # noqa: E402

if __name__ == "__main__":
    port, store, lifetime = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    assert "torch" not in sys.modules
    server = serve(FileSink(store), port)
    print(f"ready {server.port}", flush=True)
    time.sleep(lifetime)
    server.stop(0)
