"""The replica autoscaler scales on GPU memory headroom read through the telemetry port: replicas' devices
mapped by CUDA_VISIBLE_DEVICES, reduced to the per-replica mean, fed as ServiceSignals.gpu_memory_used."""

from __future__ import annotations

import pytest

from gpuplane.autoscale import ReplicaAutoscaler, ReplicaReasonCode, ServiceSignals
from gpuplane.policy.schema_serving import ReplicaAutoscalingSpec, ServiceSpec, SloSpec
from gpuplane.telemetry import DeviceReading, GaugeSource, VirtualTelemetry, job_gauges, service_gauges

GIB = 1 << 30


def memory_service(headroom: float = 0.2) -> ServiceSpec:
    return ServiceSpec(
        name="chat",
        team="t",
        replica_startup_s=60,
        slo=SloSpec(latency_ms=500),
        autoscaling=ReplicaAutoscalingSpec(min_replicas=1, max_replicas=20, min_gpu_memory_headroom=headroom),
    )


def node(used_gib: list[float], total_gib: float = 80) -> list[DeviceReading]:
    return [
        DeviceReading(i, f"GPU-{i}0000000", "H100", GaugeSource.NVML, 0.5, int(u * GIB), int(total_gib * GIB))
        for i, u in enumerate(used_gib)
    ]


def test_replicas_short_of_headroom_add_replicas_in_proportion():
    devices = node([76, 72, 76, 72])
    gauges = job_gauges(devices, {f"replica-{i}": str(i) for i in range(4)})
    reduced = service_gauges(list(gauges.values()))
    assert reduced.gpu_memory_used == pytest.approx((76 + 72 + 76 + 72) / 4 / 80)
    assert reduced.min_memory_headroom == pytest.approx(1 - 76 / 80) and reduced.memory_known == 4
    scaler = ReplicaAutoscaler(memory_service(headroom=0.2))
    decision = scaler.decide(ServiceSignals(now=0, rps=0, ready=4, gpu_memory_used=reduced.gpu_memory_used))
    assert decision.code is ReplicaReasonCode.SCALE_UP
    assert decision.details["signals"] == {"gpu_memory": 5}, "ceil(4 x 0.925 / 0.8)"
    assert decision.desired == 5


def test_replicas_with_room_to_spare_scale_down_after_the_window():
    full = service_gauges(list(job_gauges(node([64, 64]), {"a": "0", "b": "1"}).values())).gpu_memory_used
    spare = service_gauges(list(job_gauges(node([20, 20]), {"a": "0", "b": "1"}).values())).gpu_memory_used
    scaler = ReplicaAutoscaler(memory_service(headroom=0.2))
    decisions = [
        scaler.decide(ServiceSignals(now=t, rps=0, ready=2, gpu_memory_used=full if t < 300 else spare))
        for t in range(0, 1200, 15)
    ]
    assert all(d.desired == 2 for d in decisions[:20]), "at exactly 1 - headroom nothing changes"
    asks_one = [d for d in decisions if d.details["signals"] == {"gpu_memory": 1}]
    assert asks_one[0].desired == 2 and asks_one[0].code is ReplicaReasonCode.STABILIZING
    assert decisions[-1].desired == 1


def test_a_replica_on_several_gpus_counts_their_memory_together():
    gauges = job_gauges(node([70, 10]), {"big": "0,1"})
    assert service_gauges(list(gauges.values())).gpu_memory_used == 80 / 160


def test_virtual_gpus_without_a_model_turn_the_memory_rule_off_instead_of_reading_zero():
    virtual = VirtualTelemetry("node-1", 2, 24 * GIB, "l4")
    gauges = job_gauges(virtual.devices(), {"a": "0", "b": "1"})
    reduced = service_gauges(list(gauges.values()))
    assert reduced.gpu_memory_used is None and reduced.memory_known == 0
    assert reduced.sources == (GaugeSource.VIRTUAL,)
    scaler = ReplicaAutoscaler(memory_service())
    decision = scaler.decide(ServiceSignals(now=0, rps=0, ready=2, gpu_memory_used=reduced.gpu_memory_used))
    assert decision.details["signals"] == {} and decision.desired == 2


def test_replicas_that_cannot_tell_are_left_out_of_the_mean():
    virtual = VirtualTelemetry("node-1", 3, 24 * GIB, "l4")
    virtual.set_usage(0, 0.9, 22 * GIB)
    virtual.set_usage(1, 0.5, 12 * GIB)
    gauges = job_gauges(virtual.devices(), {"a": "0", "b": "1", "c": "2"})
    reduced = service_gauges(list(gauges.values()))
    assert (reduced.replicas, reduced.memory_known, reduced.utilization_known) == (3, 2, 2)
    assert reduced.gpu_memory_used == pytest.approx((22 + 12) / 2 / 24)
    assert reduced.gpu_utilization == pytest.approx(0.7)
