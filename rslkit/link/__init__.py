"""The torch-free link between actors and a learner (docs/realworld.md): what the real-world loop's learner and
actor processes (:mod:`rslkit.realworld`) and the ROS 2 node's actor mode (:mod:`rslkit.deploy.ros2.actor`) share.

- :mod:`~rslkit.link.wire`: every message, a small typed JSON header plus named arrays as safetensors bytes,
  validated completely on decoding (no pickle anywhere), with one registry of message kinds:
  :mod:`~rslkit.link.transitions` (the off-policy loop) and :mod:`~rslkit.link.rollouts` (the on-policy loop)
  register theirs;
- :mod:`~rslkit.link.segment_log`: one fsynced log of messages in segment files, used as the actor's
  :mod:`~rslkit.link.spool` (nothing is lost before the learner acknowledges it) and the learner's
  :mod:`~rslkit.link.journal` (nothing acknowledged is lost by a learner killed between checkpoints);
  :mod:`~rslkit.link.spool_writer` appends off the control loop, :mod:`~rslkit.link.episodes` numbers episodes
  across restarts;
- :mod:`~rslkit.link.transport` (the gRPC contract: token, TLS, limits, keepalives), :mod:`~rslkit.link.server`
  (``LearnerServer``: one handler per message kind; :mod:`~rslkit.link.sink` holds the transitions handler) and
  :mod:`~rslkit.link.client` (``ActorClient``, the one client: heartbeats, reconnects with backoff, the spool,
  weights, replies).

Imports only numpy, safetensors, grpc (server, client, transport) and :mod:`rslkit.utils`: never torch.
"""
