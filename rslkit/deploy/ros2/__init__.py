"""ROS 2 deployment: an rclpy node that drives a robot from an exported ONNX policy.

The control logic (joint reordering, observations, limits, watchdog, chunk execution, recording) is plain Python
and NumPy in :mod:`~rslkit.deploy.ros2.controller` and its helpers; only :mod:`~rslkit.deploy.ros2.node` imports
rclpy. Run it with ``python -m rslkit.deploy.ros2 --policy policy.onnx --ros-args -p joint_names:=[...]``.
"""
