"""Run a local multi-node Ray cluster in its own process for the restart test: a head and the worker nodes
named on the command line (NAME:POOL:GPUS ...). Prints the address, then serves until stdin closes."""

import sys

import ray

from gpuplane.live.ray_cluster import LocalRayCluster

cluster = LocalRayCluster()
ray.init(address=cluster.address, log_to_driver=False)
for spec in sys.argv[1:]:
    name, pool, gpus = spec.split(":")
    cluster.add_node(name, pool, int(gpus), pool)
print(cluster.address, flush=True)
sys.stdin.read()
ray.shutdown()
cluster.shutdown()
