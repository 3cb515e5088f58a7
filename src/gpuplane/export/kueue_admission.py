"""Admission tied to nodes actually arriving: a Kueue AdmissionCheck backed by ProvisioningRequests.

With Cluster Autoscaler, Kueue's ProvisioningRequest admission check creates a ProvisioningRequest of class
``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` for each workload that lands on an autoscaled flavor and
admits it only once the autoscaler has brought up nodes for all its pods (all or nothing, like gpuplane's
gang admission). Karpenter does not serve ProvisioningRequests; there the export relies on Kueue's
``waitForPodsReady`` (evict and requeue a gang whose pods do not all start) and says so.
"""

from __future__ import annotations

from gpuplane.export.kueue_quota import API
from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import GPU, PolicyView, metadata, mig_resource

CHECK = "gpuplane-nodes"
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
FILE = "kueue.yaml"


def autoscaled_flavors(view: PolicyView) -> list[str]:
    """Flavors with a pool that can grow (max_nodes above min_nodes), where admission must wait for nodes."""
    return [name for name, shape in view.flavors.items() if any(p.max_nodes > p.min_nodes for p in shape.pools)]


def provisioning_checks(view: PolicyView, bundle: ExportBundle) -> Obj | None:
    """Emit the AdmissionCheck and its ProvisioningRequestConfig; the ClusterQueues' admissionChecksStrategy."""
    flavors = autoscaled_flavors(view)
    if not flavors:
        return None
    managed = [GPU, *(mig_resource(p) for p in view.mig_milli())]
    bundle.add(
        FILE,
        {
            "apiVersion": API,
            "kind": "ProvisioningRequestConfig",
            "metadata": metadata(CHECK),
            "spec": {
                "provisioningClassName": PROVISIONING_CLASS,
                "managedResources": managed,
                "retryStrategy": {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800},
            },
        },
        {
            "apiVersion": API,
            "kind": "AdmissionCheck",
            "metadata": metadata(CHECK),
            "spec": {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": CHECK},
            },
        },
    )
    return {"admissionChecks": [{"name": CHECK, "onFlavors": flavors}]}


def karpenter_admission_warning(bundle: ExportBundle) -> None:
    """Karpenter has no ProvisioningRequest support: admission does not wait for nodes."""
    bundle.warn(
        "pools[].max_nodes",
        "admission tied to node provisioning",
        "Karpenter does not serve Kueue's ProvisioningRequest admission check, so Kueue admits a gang before its "
        "nodes exist; waitForPodsReady (kueue-config-snippet.yaml) evicts and requeues a gang whose pods do not "
        "all start within 10 minutes. With --node-autoscaler cluster-autoscaler the export adds the check",
        "approximated",
    )
