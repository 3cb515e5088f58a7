"""Compile a gpuplane policy to the Kubernetes stack (Kueue, Karpenter or Cluster Autoscaler, KEDA or HPA,
PrometheusRules, Grafana), saying which policy features the stack cannot express."""

from gpuplane.export.bundle import ExportOptions, export_kubernetes
from gpuplane.export.model import ExportBundle, ExportError, ExportWarning, Manifest

__all__ = ["ExportBundle", "ExportError", "ExportOptions", "ExportWarning", "Manifest", "export_kubernetes"]
