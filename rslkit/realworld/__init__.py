"""Real-world RL: the learner and actor processes of the asynchronous actor/learner loop (docs/realworld.md).

``python -m rslkit.realworld learner | actor | local`` runs it. Everything between the two processes (the wire
format, the spool and the journal, the gRPC server and client) is the torch-free :mod:`rslkit.link` layer, which
the ROS 2 node's actor mode uses too. Here:

- :mod:`~rslkit.realworld.learner` (``RealWorldLearner``: SAC fed by actors, the RLPD / HIL-SERL recipe) and
  :mod:`~rslkit.realworld.onpolicy_learner` (``PPOLearner``, ``ReinFlowLearner``: on-policy with bounded staleness);
- :mod:`~rslkit.realworld.actor` (``Actor``: one env or robot, the policy, the spool) and
  :mod:`~rslkit.realworld.onpolicy_actor` (``OnPolicyActor``: batched envs, one rollout per permit);
- :mod:`~rslkit.realworld.sim_robot` (``RealTimeRobot``: a simulated task paced like a real robot),
  :mod:`~rslkit.realworld.interventions` and :mod:`~rslkit.realworld.teleop` (who may take over: a scripted human,
  a keyboard, a gamepad; numpy only), :mod:`~rslkit.realworld.rewards` (the actor's reward plug-ins),
  :mod:`~rslkit.realworld.experts` (a task's scripted expert as a scripted human).
"""
