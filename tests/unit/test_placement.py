"""Gang placement: all-or-nothing, best-fit, topology, taints/selectors/pools, class isolation, MIG."""

from __future__ import annotations

from gpuplane.model import Node, Toleration, TopologyMode
from tests.unit.fixtures import SPOT_OK, codes, cycle, job, kinds, nodes, policy, run_from


def pods_of(res, wid):
    (d,) = [d for d in res.admitted if d.workload_id == wid]
    return d.placement.pods


def test_gang_is_all_or_nothing():
    p = policy()
    res = cycle(p, nodes(p, train=2), [job("big", pods=3, gpus=8)])
    assert codes(res) == {"big": "insufficient_capacity"} or codes(res) == {"big": "reserved"}
    assert not res.admitted
    ok = cycle(p, nodes(p, train=3), [job("big", pods=3, gpus=8)])
    assert len(pods_of(ok, "big")) == 3


def test_elastic_job_starts_with_what_fits_above_its_minimum():
    p = policy()
    res = cycle(p, nodes(p, train=2), [job("el", pods=4, gpus=8, min_count=2, klass="batch")])
    assert len(pods_of(res, "el")) == 2
    res = cycle(p, nodes(p, train=1), [job("el", pods=4, gpus=8, min_count=2, klass="batch")])
    assert not res.admitted


def test_best_fit_prefers_fuller_nodes_and_keeps_whole_nodes_free():
    p = policy()
    first = [job("six", gpus=6)]
    r1 = cycle(p, nodes(p, train=2), first)
    running = run_from(r1, first)
    r2 = cycle(p, nodes(p, train=2), [job("two", gpus=2, t=1)], running)
    assert pods_of(r2, "two")[0].node == pods_of(r1, "six")[0].node
    assert len(pods_of(r2, "two")[0].gpus) == 2


def test_gang_stays_in_one_topology_domain_when_it_can():
    p = policy()
    node_list = nodes(p, train=6)  # domains of 2 nodes each
    blocker = [job("one", gpus=8)]
    running = run_from(cycle(p, node_list, blocker), blocker)  # takes a node of domain d0
    res = cycle(p, node_list, [job("pair", pods=2, gpus=8, t=1, klass="batch")], running)
    domains = {n.name: n.domain for n in node_list}
    assert len({domains[pod.node] for pod in pods_of(res, "pair")}) == 1


def test_required_topology_waits_rather_than_spread():
    p = policy()
    node_list = nodes(p, train=4)
    blockers = [job("x", gpus=8), job("y", gpus=8, queue="b", t=1)]
    first = cycle(p, node_list, blockers)
    running = run_from(first, blockers)
    # x and y sit in different domains? then no domain has 2 free nodes
    used = {n.node for w in running for n in w.placement.pods}
    domains = {n.name: n.domain for n in node_list}
    assert len({domains[u] for u in used}) in (1, 2)
    gang = [job("gang", pods=2, gpus=8, t=2, klass="batch", topology=TopologyMode.REQUIRED)]
    res = cycle(p, node_list, gang, running)
    free_by_domain: dict[str, int] = {}
    for n in node_list:
        if n.name not in used:
            free_by_domain[n.domain] = free_by_domain.get(n.domain, 0) + 1
    if max(free_by_domain.values()) >= 2:
        assert kinds(res)["gang"] == "admit"
    else:
        assert codes(res)["gang"] in ("topology_unsatisfiable", "reserved")
        spread = cycle(p, node_list, [job("gang", pods=2, gpus=8, t=2, klass="batch")], running)
        assert kinds(spread)["gang"] == "admit"


def test_required_topology_unsatisfiable_reason():
    p = policy()
    node_list = [Node("n0", "train", 8, "d0"), Node("n1", "train", 8, "d1")]
    res = cycle(p, node_list, [job("gang", pods=2, gpus=8, klass="batch", topology=TopologyMode.REQUIRED)], now=0)
    assert codes(res)["gang"] == "topology_unsatisfiable"
    assert res.decisions[0].reason.details["largest_domain_fits"] == 1


def test_taints_need_tolerations_and_selectors_must_match():
    p = policy()
    node_list = nodes(p, spot=2)
    res = cycle(p, node_list, [job("nope", gpus=1, klass="batch", checkpoint_interval_s=600, pools=("spot",))])
    assert codes(res)["nope"] == "no_eligible_pool"
    assert "taint spot=true:NoSchedule not tolerated" in res.decisions[0].reason.details["rejected_pools"]["spot"]
    ok = cycle(
        p,
        node_list,
        [job("yes", gpus=1, klass="batch", checkpoint_interval_s=600, tolerations=SPOT_OK, pools=("spot",))],
    )
    assert kinds(ok)["yes"] == "admit"
    sel = cycle(p, nodes(p, train=1), [job("sel", gpus=1, node_selector={"zone": "x"})])
    assert codes(sel)["sel"] == "no_eligible_pool"


def test_spot_needs_a_declared_checkpoint_interval():
    p = policy()
    res = cycle(p, nodes(p, spot=2), [job("b", gpus=1, klass="batch", tolerations=SPOT_OK, pools=("spot",))])
    assert "spot needs a checkpoint" in res.decisions[0].reason.details["rejected_pools"]["spot"]
    slow = job("s", gpus=1, klass="batch", tolerations=SPOT_OK, pools=("spot",), checkpoint_interval_s=7200)
    assert codes(cycle(p, nodes(p, spot=2), [slow]))["s"] == "no_eligible_pool"


def test_training_never_goes_to_spot_by_default():
    p = policy()
    res = cycle(
        p,
        nodes(p, spot=2),
        [job("t", gpus=1, tolerations=SPOT_OK, checkpoint_interval_s=60, pools=("spot",))],
    )
    assert "pool takes only batch" in res.decisions[0].reason.details["rejected_pools"]["spot"]


def test_inference_is_isolated_from_batch_pools():
    p = policy(
        teams=[
            {
                "name": "a",
                "cohort": "c",
                "pools": ["train", "infer"],
                "quotas": {"h100": {"nominal": 32}, "h100-infer": {"nominal": 8}},
            },
            {"name": "b", "cohort": "c", "pools": ["train"], "quotas": {"h100": {"nominal": 32}}},
            {"name": "serve", "pools": ["infer"], "quotas": {"h100-infer": {"nominal": 24}}},
        ]
    )
    res = cycle(p, nodes(p, train=2, infer=1), [job("svc", gpus=1, klass="inference"), job("trn", gpus=1, t=1)])
    assert pods_of(res, "svc")[0].node.startswith("infer")
    assert pods_of(res, "trn")[0].node.startswith("train")
    only_train = cycle(p, nodes(p, train=2), [job("svc", gpus=1, klass="inference", pools=("train",))])
    assert codes(only_train)["svc"] == "no_eligible_pool"


def test_mig_slices_share_a_gpu_and_never_mix_with_whole_allocation():
    p = policy()
    node_list = [Node("infer-0", "infer", 8, "infer")]
    svc = [job("small", queue="serve", klass="inference", pods=7, mig="1g.10gb")]
    res = cycle(p, node_list, svc)
    pods = pods_of(res, "small")
    assert {pod.gpus for pod in pods} == {(0,)}  # seven 1g slices fill exactly one GPU
    running = run_from(res, svc)
    more = [
        job("mid", queue="serve", klass="inference", pods=2, mig="3g.40gb", t=1),
        job("whole", queue="serve", klass="inference", gpus=7, t=2),
    ]
    res2 = cycle(p, node_list, more, running)
    mid_gpus = {pod.gpus[0] for pod in pods_of(res2, "mid")}
    assert mid_gpus == {1}  # two 3g slices share GPU 1 (6 of 7 compute, 8 of 8 memory slices)
    assert codes(res2)["whole"] in ("insufficient_capacity", "reserved")  # only 6 whole GPUs left
    whole6 = cycle(p, node_list, [job("whole", queue="serve", klass="inference", gpus=6, t=2)], running)
    whole_gpus = pods_of(whole6, "whole")[0].gpus
    assert len(whole_gpus) == 6 and 0 not in whole_gpus  # the sliced GPU is never whole-allocated


def test_mig_request_on_pool_without_that_profile():
    p = policy()
    res = cycle(p, nodes(p, infer=1), [job("x", queue="serve", klass="inference", mig="7g.80gb")])
    assert codes(res)["x"] == "no_eligible_pool"


def test_cordoned_and_booting_nodes_take_no_work():
    p = policy()
    node_list = [Node("n0", "train", 8, "d0", ready=False), Node("n1", "train", 8, "d0", schedulable=False)]
    res = cycle(p, node_list, [job("j", gpus=1)])
    assert not res.admitted


def test_tolerations_match_like_kubernetes():
    assert Toleration("spot", "Exists").tolerates("spot", "anything", "NoSchedule")
    assert Toleration("", "Exists").tolerates("any", "x", "NoExecute")
    assert not Toleration("spot", value="false").tolerates("spot", "true", "NoSchedule")
    assert not Toleration("spot", value="true", effect="NoExecute").tolerates("spot", "true", "NoSchedule")
