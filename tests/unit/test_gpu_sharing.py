"""GPU shares: pods asking part of one GPU pack onto shared GPUs, charge quota by the share, free it whole."""

from __future__ import annotations

import dataclasses

from gpuplane.model import PodSet, RunningWorkload
from tests.unit.fixtures import BASE_POLICY, SPOT_OK, codes, cycle, job, kinds, nodes, policy

SHARED_SPOT = [{**BASE_POLICY["pools"][2], "gpu_sharing": True}]


def sharing_policy():
    return policy(pools=[*BASE_POLICY["pools"][:2], *SHARED_SPOT])


def share(wid, milli, t=0.0, queue="a", pods=1):
    w = spot_job(wid, 1, t, queue)
    return dataclasses.replace(w, pods=PodSet(pods, 1, gpu_milli=milli))


def spot_job(wid, gpus, t=0.0, queue="a"):
    return job(
        wid, queue=queue, klass="batch", gpus=gpus, t=t, pools=("spot",), checkpoint_interval_s=600, tolerations=SPOT_OK
    )


def test_shares_pack_onto_one_gpu_before_taking_another():
    p = sharing_policy()
    res = cycle(p, nodes(p, spot=1), [share("s1", 500), share("s2", 300, t=1), share("s3", 200, t=2)])
    placements = {d.workload_id: d.placement.pods[0] for d in res.admitted}
    assert len(placements) == 3
    assert len({(pp.node, pp.gpus) for pp in placements.values()}) == 1, "three shares summing to 1 GPU: one GPU"
    assert {pp.gpu_milli for pp in placements.values()} == {500, 300, 200}
    assert all(d.placement.whole_gpus == 0 for d in res.admitted)


def test_a_full_shared_gpu_pushes_the_next_share_to_a_fresh_gpu_and_whole_work_keeps_off_it():
    p = sharing_policy()
    node_list = nodes(p, spot=1)  # 4 GPUs
    first = cycle(p, node_list, [share("s1", 700), share("s2", 700, t=1)])
    shares = [share("s1", 700), share("s2", 700, t=1)]
    running = [RunningWorkload(w, d.placement, 0.0, None) for w, d in zip(shares, first.admitted, strict=True)]
    assert len({d.placement.pods[0].gpus for d in first.admitted}) == 2
    res = cycle(p, node_list, [spot_job("whole", 3, t=5)], running, now=10)
    assert kinds(res) == {"whole": "wait"}  # 2 of 4 GPUs are shared: 3 whole GPUs do not fit
    assert res.decisions[0].reason.details["pods_that_fit"] == 0
    two = cycle(p, node_list, [spot_job("two", 2, t=5)], running, now=10)
    assert kinds(two) == {"two": "admit"}
    assert set(two.admitted[0].placement.pods[0].gpus).isdisjoint(
        g for d in first.admitted for g in d.placement.pods[0].gpus
    )


def test_quota_is_charged_by_the_share():
    p = policy(
        pools=[*BASE_POLICY["pools"][:2], *SHARED_SPOT],
        teams=[
            {"name": "a", "pools": ["train", "spot"], "quotas": {"h100": {"nominal": 8}, "l4": {"nominal": 1}}},
            *BASE_POLICY["teams"][1:],
        ],
    )
    res = cycle(p, nodes(p, spot=1), [share("s1", 600), share("s2", 400, t=1), share("s3", 100, t=2)])
    assert kinds(res) == {"s1": "admit", "s2": "admit", "s3": "wait"}  # 0.6 + 0.4 = the 1-GPU quota
    assert codes(res)["s3"] == "quota_nominal_exceeded"


def test_pools_that_do_not_share_gpus_reject_share_pods_with_the_reason():
    p = policy()
    res = cycle(p, nodes(p, spot=1), [share("s1", 500)])
    (d,) = res.decisions
    assert d.reason.code.value == "no_eligible_pool"
    assert "gpu_sharing" in d.reason.details["rejected_pools"]["spot"]


def test_a_share_out_of_range_is_an_invalid_workload():
    p = sharing_policy()
    res = cycle(p, nodes(p, spot=1), [share("bad", 1000)])
    assert codes(res)["bad"] == "invalid_workload"


def test_not_enough_room_names_the_shares():
    p = sharing_policy()
    res = cycle(p, nodes(p, spot=1), [share("gang", 600, pods=5)])  # 5 shares of 0.6 need 5 GPUs; 4 exist
    (d,) = res.decisions
    assert d.reason.code.value == "insufficient_capacity"
    assert (d.reason.details["shares_that_fit"], d.reason.details["shares_needed"]) == (4, 5)
    assert "4 share(s) of 600 thousandths fit, 5 needed" in d.reason.message
