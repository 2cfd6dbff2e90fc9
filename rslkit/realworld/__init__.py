"""Real-world RL: the asynchronous actor/learner loop for robots (issue 14).

The package will hold the loop that trains on a physical robot while the robot keeps its control rate: the
transport, the learner and the actor, weight pushes and human interventions. Built so far are its foundations, which
run without torch (the robot side has numpy, safetensors and grpcio only):

- :mod:`rslkit.realworld.wire`: the wire format, a small typed JSON header plus named arrays as safetensors bytes,
  validated completely on decoding.
- :mod:`rslkit.realworld.spool`: the actor's on-disk spool, so that no transition is lost before the learner
  acknowledges it.
- :mod:`rslkit.realworld.transport`, :mod:`~rslkit.realworld.transport_server` (``LearnerServer``),
  :mod:`~rslkit.realworld.transport_client` (``ActorClient``), :mod:`~rslkit.realworld.transport_sink`: one gRPC
  bidirectional stream per actor (transitions and heartbeats up; acks and weights down), token and TLS, every
  message validated, reconnects with backoff, a dead learner noticed within a bounded time.

See docs/realworld.md.
"""
