"""kill -9 an actor process while it appends and acknowledges: after reopening, nothing it was told is stored is
missing, nothing is there twice, and the next actor process continues the sequence."""

from __future__ import annotations

import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from rslkit.link import wire
from rslkit.link.spool import Spool
from rslkit.link.transitions import Transitions, TransitionSchema

HERE = Path(__file__).resolve().parent
ROUNDS = 4
# The child: messages of 4-13 kB (two 24x24x3 images per transition) in 100 kB segments that its acks delete.
CHILD = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
import numpy as np
from wire_samples import make_batch
from rslkit.link import wire
from rslkit.link.spool import Spool
from rslkit.link.transitions import TransitionSchema

schema = TransitionSchema(
    {{"image": wire.ArraySpec((24, 24, 3), "uint8"), "state": wire.ArraySpec((6,), "float32")}},
    wire.ArraySpec((2,), "float32"),
)
assert "torch" not in sys.modules
spool = Spool(sys.argv[1], "actor-0", schema, segment_bytes=100_000)
rng = np.random.default_rng(int(sys.argv[2]))
def say(line):
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

say(f"open {{spool.next_seq}} {{spool.acked}}")
for episode in range(10**6):
    last = spool.append(make_batch(int(rng.integers(1, 4)), rng, episode=episode, schema=schema))
    say(f"seq {{last}}")
    if episode % 4 == 3:
        spool.ack(last - int(rng.integers(0, 5)))
        say(f"ack {{spool.acked}}")
"""
BIG = TransitionSchema(
    {"image": wire.ArraySpec((24, 24, 3), "uint8"), "state": wire.ArraySpec((6,), "float32")},
    wire.ArraySpec((2,), "float32"),
)


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    out: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.endswith("\n"):  # a line cut by the kill was not completely said
                out.put(line.strip())
        out.put(None)

    threading.Thread(target=read, daemon=True).start()
    return out


def _run_and_kill(directory: Path, seed: int, appends: int) -> list[list[str]]:
    """Start the child, wait for ``appends`` appends (at most 20 s), SIGKILL it; all the lines it printed."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory), str(seed)], stdout=subprocess.PIPE, text=True)
    lines, printed, deadline = _lines(proc), [], time.monotonic() + 20
    try:
        while sum(p[0] == "seq" for p in printed) < appends and time.monotonic() < deadline:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert line is not None, f"the child ended early: {printed[-3:]}"
            printed.append(line.split())
        time.sleep(random.Random(seed).uniform(0, 0.004))  # land anywhere inside an append or an ack
    finally:
        proc.kill()
        proc.wait(timeout=10)
    while (line := lines.get(timeout=10)) is not None:  # what it printed before it died: also returned calls
        printed.append(line.split())
    assert printed and printed[0][0] == "open", printed[:3]
    return printed


def test_sigkill_loses_nothing_append_returned_and_duplicates_nothing(tmp_path: Path) -> None:
    r, stored, acked = random.Random(0), set(), -1
    expected_open = ["open", "0", "-1"]
    for round_ in range(ROUNDS):
        printed = _run_and_kill(tmp_path, seed=round_, appends=r.randint(5, 40))
        assert printed[0] == expected_open, "the child resumes where the spool stopped"
        stored |= {int(p[1]) for p in printed if p[0] == "seq"}
        acked = max([acked] + [int(p[1]) for p in printed if p[0] == "ack"])
        with Spool(tmp_path, "actor-0", BIG, segment_bytes=100_000) as spool:
            seqs = []
            for *_, data in spool.pending():
                message = wire.decode(data, BIG)  # intact: checksum, schema, values
                assert isinstance(message, Transitions)
                seqs += message.seq.tolist()
            assert spool.acked >= acked, "an ack that returned is durable"
            start = seqs[0] if seqs else spool.acked + 1
            assert start <= spool.acked + 1, "nothing unacknowledged is missing at the front"
            assert seqs == list(range(start, spool.next_seq)), "each seq once, in order, none missing"
            assert {s for s in stored if s > spool.acked} <= set(seqs), "a returned append is missing"
            assert max(stored) < spool.next_seq
            expected_open = ["open", str(spool.next_seq), str(spool.acked)]
    assert len(stored) > ROUNDS * 5
