"""gpuplane: GPU scheduling and autoscaling for internal AI platforms."""

__version__ = "0.1.0"
