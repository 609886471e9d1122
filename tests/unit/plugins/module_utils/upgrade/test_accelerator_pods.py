"""Every pod that uses the accelerator is an accelerator pod, however it got the device: extended
resources, DRA claims allocated by the vendor's DRA driver, device-node hostPath, the vendor's runtime
class with all devices visible; and the DRA kubelet plugin is paused like an operand.

Expected rule texts and claim keys are written out here, not computed with the product's helpers."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import jinja2
import pytest
from fake_k8s import FakeCluster, Resp, make_node
from kubernetes.client.rest import ApiException
from upgrade_pod_fixtures import gpu_labels, on, pod

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import ProfileError, resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import eviction_rules, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import NodeUpgrade, UpgradeFailed
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy
from ansible_collections.npuops.fleet.plugins.plugin_utils.window_record import longest_host

NV = resolve_profile("nvidia")
RBLN = resolve_profile("rebellions")
STATE = NV["upgrade_state_label"]
PLUGIN_LABEL = "nvidia.com/gpu.deploy.dra-kubelet-plugin"
PLUGIN_POD_LABELS = {"nvidia-dra-driver-gpu-component": "kubelet-plugin"}


def claim(name, ns="ml", drivers=("gpu.nvidia.com",)):
    """A resource.k8s.io/v1 ResourceClaim as the apiserver returns it, allocated to ``drivers``."""
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    if drivers:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": d, "pool": "node-1", "device": "gpu-%d" % i} for i, d in enumerate(drivers)
        ]}}}
    return obj


def dra_pod(name, ns="ml", claim_name=None, template=None, made=None, **kw):
    """A pod naming a ResourceClaim directly, or a ResourceClaimTemplate (``made``: the claim the
    resourceclaim controller made for it, as status.resourceClaimStatuses says)."""
    p = pod(name, ns=ns, **kw)
    entry = {"name": "gpu"}
    if claim_name:
        entry["resourceClaimName"] = claim_name
    if template:
        entry["resourceClaimTemplateName"] = template
    p["spec"]["resourceClaims"] = [entry]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    if made:
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": made}]
    return p


def host_path_pod(name, path, owner="ReplicaSet", **kw):
    p = pod(name, owner=owner, **kw)
    p["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": path}}]
    return p


def runtime_pod(name, runtime="nvidia", env=None, owner="ReplicaSet"):
    p = pod(name, owner=owner)
    p["spec"]["runtimeClassName"] = runtime
    if env is not None:
        p["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": env}]
    return p


# ---- the rules -------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "p, claims, expected",
    [
        (pod("a", resources={"limits": {"nvidia.com/gpu": "1"}}), {}, "extended resource nvidia.com/gpu"),
        (pod("a", resources={"requests": {"nvidia.com/mig-1g.10gb": "1"}}), {},
         "extended resource nvidia.com/mig-1g.10gb"),
        (dra_pod("a", claim_name="c1"), {"ml/c1": claim("c1")}, "DRA claim ml/c1 allocated by gpu.nvidia.com"),
        (dra_pod("a", template="gpu-tpl", made="a-gpu-x7k2"), {"ml/a-gpu-x7k2": claim("a-gpu-x7k2")},
         "DRA claim ml/a-gpu-x7k2 allocated by gpu.nvidia.com"),
        (dra_pod("a", claim_name="imex"), {"ml/imex": claim("imex", drivers=("compute-domain.nvidia.com",))},
         "DRA claim ml/imex allocated by compute-domain.nvidia.com"),
        (dra_pod("a", claim_name="c1"), {"ml/c1": claim("c1", drivers=("gpu.example.com",))}, None),
        (dra_pod("a", claim_name="c1"), {"ml/c1": claim("c1", drivers=())}, None),  # not allocated
        (dra_pod("a", template="gpu-tpl"), {}, None),  # claim not made yet
        (dra_pod("a", claim_name="c1"), {"ml/c1": "HTTP 403 Forbidden"},
         "DRA claim ml/c1 (could not be read: HTTP 403 Forbidden; counted as the vendor's)"),
        (host_path_pod("a", "/dev/nvidia0"), {}, "hostPath /dev/nvidia0"),
        (host_path_pod("a", "/dev/nvidiactl"), {}, "hostPath /dev/nvidiactl"),
        (host_path_pod("a", "/dev"), {}, None),
        (host_path_pod("a", "/var/lib/kubelet"), {}, None),
        (runtime_pod("a", env="all"), {}, "runtimeClassName nvidia with NVIDIA_VISIBLE_DEVICES=all"),
        (runtime_pod("a", env="0,1"), {}, "runtimeClassName nvidia with NVIDIA_VISIBLE_DEVICES=0,1"),
        (runtime_pod("a", env="none"), {}, None),
        (runtime_pod("a", env="void"), {}, None),
        # only the image's env could say (CUDA images set all): the vendor's runtime class alone counts
        (runtime_pod("a", env=None), {},
         "runtimeClassName nvidia (NVIDIA_VISIBLE_DEVICES from the image, not visible to the API)"),
        # the vendor's runtime as the node's default: the variable alone gives the devices
        (runtime_pod("a", runtime="runc", env="all"), {}, "NVIDIA_VISIBLE_DEVICES=all"),
        (runtime_pod("a", runtime=None, env="GPU-4b1c"), {}, "NVIDIA_VISIBLE_DEVICES=GPU-4b1c"),
        (runtime_pod("a", runtime=None, env="void"), {}, None),
        (runtime_pod("a", runtime=None, env=None), {}, None),
        (pod("a"), {}, None),
    ],
)
def test_accelerator_rule(p, claims, expected):
    assert eviction_rules.accelerator_rule(p, NV, claims) == expected


def test_rules_follow_the_profile():
    assert eviction_rules.accelerator_rule(host_path_pod("a", "/dev/rbln0"), RBLN) == "hostPath /dev/rbln0"
    assert eviction_rules.accelerator_rule(host_path_pod("a", "/dev/nvidia0"), RBLN) is None
    # no DRA driver in the profile: a claim is never read nor counted
    assert eviction_rules.claims_to_read([on("n1", dra_pod("a", claim_name="c1"))], RBLN) == []
    assert eviction_rules.accelerator_rule(dra_pod("a", claim_name="c1"), RBLN) is None
    own = resolve_profile("rebellions", {"dra_drivers": ["npu.rebellions.ai"]})
    assert eviction_rules.accelerator_rule(
        dra_pod("a", claim_name="c1"), own, {"ml/c1": claim("c1", drivers=("npu.rebellions.ai",))}
    ) == "DRA claim ml/c1 allocated by npu.rebellions.ai"


def test_claims_to_read_only_for_the_pods_the_step_considers():
    pods = [
        dra_pod("a", claim_name="shared"),
        dra_pod("b", claim_name="shared"),  # the same claim: one read
        dra_pod("c", template="t", made="c-gpu-1"),
        dra_pod("d", template="t"),  # not made yet: nothing to read
        dra_pod("e", claim_name="e1", resources={"limits": {"nvidia.com/gpu": "1"}}),  # matched already
        dra_pod("f", claim_name="f1", owner="DaemonSet"),
        dra_pod("g", claim_name="g1", phase="Succeeded"),
        dra_pod("h", claim_name="h1", ns="other"),
    ]
    pods[4]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert eviction_rules.claims_to_read(pods, NV) == ["ml/c-gpu-1", "ml/shared", "other/h1"]


def test_plan_pod_deletion_names_the_rule_of_each_pod():
    pods = [
        on("n1", dra_pod("trainer", claim_name="c1")),
        on("n1", host_path_pod("smi-exporter", "/dev/nvidiactl")),
        on("n1", pod("web")),
        on("n1", dra_pod("other-driver", claim_name="c2")),
        on("n1", dra_pod("leaving", claim_name="c1", deleting=True)),
    ]
    claims = {"ml/c1": claim("c1"), "ml/c2": claim("c2", drivers=("gpu.example.com",))}
    plan = eviction_rules.plan_pod_deletion(pods, parse_policy({}).pod_deletion, NV, claims)
    assert sorted(plan.remove) == ["default/smi-exporter", "ml/trainer"]
    assert plan.wait == ["ml/leaving"]
    assert plan.rules == {
        "ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com",
        "default/smi-exporter": "hostPath /dev/nvidiactl",
        "ml/leaving": "DRA claim ml/c1 allocated by gpu.nvidia.com",
    }


def test_daemonset_agents_using_the_device_are_reported_not_removed():
    agent = host_path_pod("dcgm-agent-x", "/dev/nvidia0", owner="DaemonSet")
    visible = runtime_pod("monitor-y", env="all", owner="DaemonSet")
    operand = pod("dp", owner="DaemonSet", node_selector={"nvidia.com/gpu.deploy.device-plugin": "true"})
    operand["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}]
    pods = [on("n1", p) for p in (agent, visible, operand, pod("kube-proxy", owner="DaemonSet"))]
    assert eviction_rules.accelerator_daemonset_pods(pods, NV) == {
        "default/dcgm-agent-x": "hostPath /dev/nvidia0",
        "default/monitor-y": "runtimeClassName nvidia with NVIDIA_VISIBLE_DEVICES=all",
    }
    assert not eviction_rules.plan_pod_deletion(pods, parse_policy({}).pod_deletion, NV).remove


# ---- profile keys ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "override, words",
    [
        ({"dra_drivers": ["GPU.nvidia.com"]}, ["dra_drivers", "'GPU.nvidia.com'", "DNS subdomain"]),
        ({"dra_drivers": [""]}, ["dra_drivers[0]", "non-empty"]),
        ({"dra_drivers": "gpu.nvidia.com"}, ["'dra_drivers'", "must be a list"]),
        ({"device_node_prefixes": ["/dev/"]}, ["device_node_prefixes", "'/dev/'"]),
        ({"device_node_prefixes": ["nvidia"]}, ["device_node_prefixes", "'nvidia'", "/dev/"]),
        ({"runtime_class_names": [3]}, ["runtime_class_names[0]"]),
        ({"dra_kubelet_plugin_selector": "app in (a"}, ["dra_kubelet_plugin_selector", "'app in (a'"]),
        ({"dra_kubelet_plugin_selector": " "}, ["dra_kubelet_plugin_selector", "every DaemonSet pod"]),
    ],
)
def test_profile_keys_are_validated(override, words):
    with pytest.raises(ProfileError) as err:
        resolve_profile("nvidia", override)
    assert "'nvidia'" in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_profile_keys_are_overridable():
    prof = resolve_profile("nvidia", {"dra_drivers": ["gpu.example.com"], "dra_kubelet_plugin_selector": None,
                                      "device_node_prefixes": ["/dev/nvidia", "/dev/dri/"]})
    assert prof["dra_drivers"] == ["gpu.example.com"] and prof["dra_kubelet_plugin_selector"] is None
    assert operands.dra_plugin_pods(prof, [plugin_pod(deploy_label=False)]) == []
    assert NV["dra_drivers"] == ["gpu.nvidia.com", "compute-domain.nvidia.com"]


# ---- NodeUpgrade on an in-memory cluster -----------------------------------------------------------

class FakeClaims:
    """resource.k8s.io/v1 read_namespaced_resource_claim over a dict; an exception value is raised."""

    def __init__(self, claims):
        self.claims = claims
        self.reads: list[str] = []

    def read_namespaced_resource_claim(self, name, namespace, _preload_content=True):
        self.reads.append("%s/%s" % (namespace, name))
        found = self.claims.get("%s/%s" % (namespace, name))
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        if isinstance(found, Exception):
            raise found
        return Resp(copy.deepcopy(found))


def plugin_pod(deploy_label=True, name="dra-plugin-n1"):
    return pod(name, ns="nvidia-dra-driver-gpu", owner="DaemonSet",
               owner_name="nvidia-dra-driver-gpu-kubelet-plugin", labels=dict(PLUGIN_POD_LABELS),
               node_selector={PLUGIN_LABEL: "true"} if deploy_label else {"nvidia.com/gpu.present": "true"})


def cluster(pods=(), **labels):
    nodes = [make_node("n%d" % i, gpu_labels(**(labels if i == 1 else {}))) for i in range(4)]
    return FakeCluster(nodes, [on("n1", p) for p in pods])


def run(c, phase, claims=None, check=False, policy=None, **kw):
    up = NodeUpgrade(None, NV, parse_policy(policy or {}), "n1", target_version="550.90.07", check_mode=check,
                     core=c, policy_api=c, resource_api=claims, **kw)
    return up.run(phase)


pytestmark = pytest.mark.usefixtures("one_shot_waits")


def test_default_policy_removes_the_dra_pod_before_host_work():
    c = cluster([dra_pod("trainer", claim_name="c1"), dra_pod("cpu-job", claim_name="c2"), pod("web")])
    api = FakeClaims({"ml/c1": claim("c1"), "ml/c2": claim("c2", drivers=("cpu.example.com",))})
    res = run(c, "prepare", api)
    assert res["state"] == sm.POD_RESTART_REQUIRED
    assert res["deleted"] == ["ml/trainer"] and not res["evicted"]
    assert sm.DRAIN_REQUIRED not in [t["to"] for t in res["transitions"]]  # drain off: the chart's default
    assert sorted(p["metadata"]["name"] for p in c.pods) == ["cpu-job", "web"]
    assert res["pod_rules"] == {"ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com"}
    assert "ml/trainer [DRA claim ml/c1 allocated by gpu.nvidia.com]" in " ".join(
        t["reason"] for t in res["transitions"])
    assert sorted(api.reads) == ["ml/c1", "ml/c2"] and res["resource_claim_reads"] == 2


def test_no_claim_read_when_no_pod_names_one():
    c = cluster([pod("gpu", resources={"limits": {"nvidia.com/gpu": "1"}}), pod("web")])
    api = FakeClaims({})
    res = run(c, "prepare", api)
    assert res["deleted"] == ["default/gpu"] and api.reads == [] and res["resource_claim_reads"] == 0


def test_unreadable_claim_counts_as_the_vendors_and_is_said():
    forbidden = ApiException(status=403, reason="Forbidden")
    c = cluster([dra_pod("trainer", claim_name="c1")])
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c,
                     resource_api=FakeClaims({"ml/c1": forbidden}))
    res = up.run("status")
    assert res["would_evict"] == ["ml/trainer"]
    assert res["pod_rules"]["ml/trainer"] == (
        "DRA claim ml/c1 (could not be read: HTTP 403 Forbidden; counted as the vendor's)")
    assert any("ResourceClaim ml/c1 could not be read (HTTP 403 Forbidden)" in w for w in up.warnings)


def test_status_names_the_rule_of_each_pod_in_the_preview():
    c = cluster([dra_pod("trainer", claim_name="c1"), host_path_pod("exporter", "/dev/nvidia0"), pod("web")])
    up = NodeUpgrade(None, NV, parse_policy({"drain": {"enable": True}}), "n1", target_version="550.90.07",
                     core=c, policy_api=c, resource_api=FakeClaims({"ml/c1": claim("c1")}))
    res = up.run("status")
    assert res["would_evict"] == ["default/exporter", "default/web", "ml/trainer"]
    assert res["pod_rules"] == {
        "ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com",
        "default/exporter": "hostPath /dev/nvidia0",
        "default/web": "drain (drain.enable: every pod)",
    }


def test_status_warns_of_daemonset_agents_holding_the_device():
    c = cluster([host_path_pod("dcgm-agent", "/dev/nvidia0", owner="DaemonSet")])
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c)
    res = up.run("status")
    assert res["accelerator_daemonset_pods"] == {"default/dcgm-agent": "hostPath /dev/nvidia0"}
    assert any("default/dcgm-agent [hostPath /dev/nvidia0]" in w for w in up.warnings)


def test_dra_kubelet_plugin_is_paused_restored_and_waited_for_like_an_operand():
    c = cluster([plugin_pod()], **{PLUGIN_LABEL: "true"})
    res = run(c, "prepare")
    labels = c.nodes["n1"]["metadata"]["labels"]
    assert res["state"] == sm.POD_RESTART_REQUIRED
    assert labels[PLUGIN_LABEL] == "paused-for-driver-upgrade"
    assert not c.pods  # its DaemonSet took the pod away: the driver is free
    last = res["transitions"][-1]["reason"]
    assert "DRA kubelet plugin nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin paused" in last
    # finish: restored, and validation waits for it (a Ready pod of its DaemonSet)
    labels.update({"nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "90",
                   "nvidia.com/cuda.driver.rev": "07"})
    with pytest.raises(UpgradeFailed) as err:
        run(c, "finish", validation_timeout=0.01)
    assert "nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin" in str(err.value)
    assert c.nodes["n1"]["metadata"]["labels"][PLUGIN_LABEL] == "true"


def test_dra_kubelet_plugin_that_cannot_be_paused_refuses_before_the_cordon():
    c = cluster([plugin_pod(deploy_label=False), dra_pod("trainer", claim_name="c1")])
    with pytest.raises(UpgradeFailed) as err:
        run(c, "prepare", FakeClaims({"ml/c1": claim("c1")}))
    msg = str(err.value)
    assert "nvidia-dra-driver-gpu/dra-plugin-n1 (DaemonSet nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet" \
           "-plugin)" in msg
    assert "kubeletPlugin.nodeSelector" in msg and "nothing was changed" in msg
    node = c.nodes["n1"]
    assert STATE not in node["metadata"]["labels"] and not node["spec"].get("unschedulable")
    assert len(c.pods) == 2 and c.writes == 0


def test_no_dra_kubelet_plugin_is_tolerated():
    c = cluster([pod("web")])
    res = run(c, "prepare")
    assert res["state"] == sm.POD_RESTART_REQUIRED
    assert "DRA kubelet plugin" not in res["transitions"][-1]["reason"]


@pytest.mark.parametrize("selector, pausable", [
    ({PLUGIN_LABEL: "true"}, True),
    ({"nvidia.com/gpu.deploy.dra-driver": "true", "nvidia.com/gpu.present": "true"}, True),
    ({"nvidia.com/gpu.present": "true"}, False),
    ({"nvidia.com/gpu.deploy.driver": "true"}, False),  # never paused: the host work replaces the driver
    ({"nvidia.com/gpu.deploy.operands": "true"}, False),
    ({}, False),
])
def test_which_dra_kubelet_plugins_the_pause_can_take_off(selector, pausable):
    p = on("n1", plugin_pod())
    p["spec"]["nodeSelector"] = selector
    expected = [] if pausable else [
        "nvidia-dra-driver-gpu/dra-plugin-n1 (DaemonSet nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin)"]
    assert operands.unpausable_dra_plugins(NV, [p]) == expected
    other = on("n1", pod("csi-node", owner="DaemonSet"))  # not the plugin's labels: never named
    assert operands.unpausable_dra_plugins(NV, [other]) == []


# ---- the plan and the summary (Jinja as Ansible's template module renders it: trim_blocks; the
# Ansible filters the templates use stood in for by their plain meaning) -------------------------------

TEMPLATES = Path(__file__).resolve().parents[5] / "roles" / "maintenance_window" / "templates"


def env() -> jinja2.Environment:
    e = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True)
    e.filters["basename"] = os.path.basename
    e.filters["zip"] = lambda a, b: list(zip(a, b))
    e.filters["npuops.fleet.longest_host"] = longest_host
    return e


def test_plan_names_the_rule_of_each_pod_it_would_evict():
    report = {"run_id": "r", "would_start": True, "batches": [["gpu-0"]], "batch_size": 1, "finished": "x",
              "refused": [], "lease": {"free": True},
              "hosts": [{"host": "gpu-0", "status": "would-upgrade", "transaction": None,
                         "would_evict": ["ml/trainer", "default/web"],
                         "pod_rules": {"ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com"}},
                        {"host": "gpu-1", "status": "would-upgrade", "transaction": None, "would_evict": []}]}
    rows = [line.split(" | ") for line in env().get_template("maintenance_plan.md.j2").render(
        _mw_plan_report=report).splitlines() if line.startswith("| gpu")]
    assert rows[0][5] == "ml/trainer [DRA claim ml/c1 allocated by gpu.nvidia.com], default/web"
    assert rows[1][5] == "-"


def test_summary_lists_the_pods_taken_off_with_their_rules():
    summary = {"run_id": "r1", "result": "ok", "not_upgraded": [], "started": "a", "finished": "b", "duration_s": 1,
               "batch_size": 1, "holder": "h",
               "hosts": [{"host": "gpu-0", "status": "upgraded",
                          "pod_rules": {"ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com",
                                        "default/agent": "hostPath /dev/nvidia0"}},
                         {"host": "gpu-1", "status": "upgraded", "pod_rules": {}},
                         {"host": "gpu-2", "status": "upgraded",
                          "pod_rules": {"a/b": "extended resource nvidia.com/gpu"}}]}
    out = env().get_template("maintenance_summary.md.j2").render(_mw_summary=summary)
    part = out[out.index("Pods taken off before the host work"):].splitlines()
    assert part[1:3] == [
        "- gpu-0: default/agent [hostPath /dev/nvidia0], ml/trainer [DRA claim ml/c1 allocated by gpu.nvidia.com]",
        "- gpu-2: a/b [extended resource nvidia.com/gpu]",
    ]


def test_visible_devices_from_a_config_map_or_an_ephemeral_container_counts():
    p = pod("from-cm")
    p["spec"]["containers"][0]["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "list"}}}]
    assert eviction_rules.accelerator_rule(p, NV) == "NVIDIA_VISIBLE_DEVICES from configMapKeyRef (value unknown)"
    debug = pod("debugged")
    debug["spec"]["ephemeralContainers"] = [
        {"name": "dbg", "image": "cuda", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]
    assert eviction_rules.accelerator_rule(debug, NV) == "NVIDIA_VISIBLE_DEVICES=all"
    # set to none in one container and not at all elsewhere: no device by this rule
    quiet = runtime_pod("quiet", runtime=None, env="none")
    assert eviction_rules.accelerator_rule(quiet, NV) is None
    # Rebellions' profile names no variable and no runtime class: nothing by this rule
    assert eviction_rules.accelerator_rule(runtime_pod("r", runtime=None, env="all"), RBLN) is None
