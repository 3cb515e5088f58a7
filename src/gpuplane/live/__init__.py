"""The live control plane: the policy core's decisions carried out on a Ray cluster, behind a REST API.

Adapters for the design's ports live here: the persistent store (``store``), the Ray engine that runs
jobs and inference replicas (``ray_engine``), the node provider (``ray_cluster``), the wall clock, and
Prometheus metrics. ``control.ControlPlane`` is the only writer of state.
"""
