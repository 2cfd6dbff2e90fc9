"""Real-world RL: the asynchronous actor/learner loop for robots (docs/realworld.md).

``python -m rslkit.realworld learner | actor | local`` runs it. The robot side runs without torch (numpy,
safetensors and grpcio only):

- :mod:`~rslkit.realworld.wire`: every message, a small typed JSON header plus named arrays as safetensors bytes,
  validated completely on decoding (no pickle anywhere);
- :mod:`~rslkit.realworld.spool`, :mod:`~rslkit.realworld.spool_writer`: the actor's on-disk spool and the thread
  that appends to it, so the control loop never waits and nothing is lost before the learner acknowledges it;
- :mod:`~rslkit.realworld.transport`, ``transport_server`` (``LearnerServer``), ``transport_client``
  (``ActorClient``), ``transport_sink``: one gRPC bidirectional stream per actor, token and TLS, deadlines,
  heartbeats, reconnects with backoff;
- :mod:`~rslkit.realworld.journal`: the learner's log of what it acknowledged;
- :mod:`~rslkit.realworld.interventions`, :mod:`~rslkit.realworld.teleop`, :mod:`~rslkit.realworld.rewards`:
  who may take over (a scripted human, a keyboard, a gamepad) and reward plug-ins.

With torch: :mod:`~rslkit.realworld.learner` (``RealWorldLearner``: SAC fed by actors, the RLPD / HIL-SERL recipe),
:mod:`~rslkit.realworld.actor` (``Actor``: one env or robot, the policy, the spool), :mod:`~rslkit.realworld.sim_robot`
(``RealTimeRobot``: a simulated task paced like a real robot), :mod:`~rslkit.realworld.experts` (a task's scripted
expert as a scripted human), :mod:`~rslkit.realworld.relabel` (demonstrations rescored by a reward plug-in).
"""
