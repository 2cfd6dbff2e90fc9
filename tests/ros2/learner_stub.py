"""A learner stand-in process for the actor-mode tests and benchmark (torch-free): a ``LearnerServer`` on
127.0.0.1:PORT with a ``MemorySink``, optionally pushing an ONNX policy as a new weights version every few seconds.

    python learner_stub.py --schema JSON [--port P] [--out KEYS.jsonl] [--weights P.onnx --push_s S] [--lifetime S]

Prints ``ready PORT`` once serving; with ``--out`` appends one JSON line ``[actor, episode, step, seq]`` per
transition stored (each once: the sink drops resends). Exits after ``--lifetime`` seconds (tests kill it earlier).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from rslkit.link.server import LearnerServer
from rslkit.link.sink import MemorySink, TransitionsHandler
from rslkit.link.transitions import Transitions, TransitionSchema


class KeySink(MemorySink):
    """A MemorySink that also writes the key of every new transition to ``out``."""

    def __init__(self, out: TextIO | None) -> None:
        super().__init__()
        self.out = out

    def __call__(self, actor_id: str, message: Transitions) -> int:
        before = len(self.received)
        watermark = super().__call__(actor_id, message)
        if self.out is not None:
            for _, seq, batch in self.received[before:]:
                for s, e, k in zip(seq, batch.episode, batch.step):
                    self.out.write(json.dumps([actor_id, int(e), int(k), int(s)]) + "\n")
            self.out.flush()
        return watermark


class LearnerStub:
    """This script in a child process (``sys.executable``), serving 127.0.0.1:``port``; SIGSTOP-able.

    Args:
        schema: the transitions' schema.
        port: 0 for any free port (see :attr:`port`).
        out: the key file (``--out``); weights: an .onnx file pushed every ``push_s``.
    """

    def __init__(
        self,
        schema: TransitionSchema,
        port: int = 0,
        out: Path | None = None,
        weights: Path | None = None,
        push_s: float = 1.0,
    ) -> None:
        args = [sys.executable, __file__, "--port", str(port), "--schema", json.dumps(schema.to_json())]
        args += ["--out", str(out)] if out else []
        args += ["--weights", str(weights), "--push_s", str(push_s)] if weights else []
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=60):
                self.kill()
                raise RuntimeError("the learner stub did not start within 60 s")
        line = self.proc.stdout.readline().split()
        if line[:1] != ["ready"]:
            self.kill()
            raise RuntimeError(f"the learner stub said {line!r}")
        self.port = int(line[1])

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT)."""
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL it (after SIGCONT, should it be stopped) and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


def read_keys(out: Path) -> list[tuple[str, int, int, int]]:
    """The ``(actor, episode, step, seq)`` lines a stub wrote."""
    return [tuple(json.loads(line)) for line in out.read_text().splitlines() if line]  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schema", required=True, help="TransitionSchema JSON")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", default="")
    parser.add_argument("--weights", default="", help="an .onnx file published as versions 1, 2, ...")
    parser.add_argument("--push_s", type=float, default=1.0)
    parser.add_argument("--lifetime", type=float, default=120.0)
    args = parser.parse_args()
    assert "torch" not in sys.modules
    schema = TransitionSchema.from_json(json.loads(args.schema))
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 - open for the process's life
    deadline = time.monotonic() + 5.0
    while True:  # a port just freed may still be held for a moment
        try:
            server = LearnerServer([TransitionsHandler(schema, KeySink(out))], f"127.0.0.1:{args.port}")
            break
        except ValueError:
            if args.port == 0 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    print(f"ready {server.port}", flush=True)
    weights = np.frombuffer(Path(args.weights).read_bytes(), np.uint8) if args.weights else None
    end, version = time.monotonic() + args.lifetime, 0
    while time.monotonic() < end:
        time.sleep(args.push_s if weights is not None else 0.2)
        if weights is not None:
            version += 1
            server.publish_weights(version, {"policy.onnx": weights})
    server.stop(0)


if __name__ == "__main__":
    main()
