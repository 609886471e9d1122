"""Lab part 2 acceptance: systemd hosts with real apt/dpkg/unattended-upgrades, a simulated
driver/kernel/kmod, real reboots, each host behind its lab Node (tests/lab/hosts/README.md).

Scratch hosts (`hostctl spawn`) are used, so the scenario hosts and Nodes that other tests rely on
are left alone; the reboot test creates its own kwok Node and a host behind it (`spawn --node`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from labhelpers import container, host_of

REPO = Path(__file__).resolve().parents[2]
HOSTS = REPO / "tests" / "lab" / "hosts"
HOSTCTL = HOSTS / "hostctl"
PODMAN = HOSTS / "bin" / "podman"
sys.path.insert(0, str(REPO / "tests" / "lab"))

pytestmark = pytest.mark.lab

V_OLD, V_NEW = "580.126.09", "580.159.03"
K_OLD, K_NEW = "5.15.0-177-generic", "5.15.0-179-generic"
NV_PKGS = ["nvidia-driver-580-server-open", "nvidia-dkms-580-server-open", "nvidia-utils-580-server",
           "nvidia-compute-utils-580-server", "libnvidia-compute-580-server", "libnvidia-common-580-server"]


def lab_dir():
    return Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))


def hostctl(*args, timeout=300):
    r = subprocess.run([str(HOSTCTL), *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())), check=False)
    assert r.returncode == 0, f"hostctl {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout.strip()


def hx(container, script, check=True, timeout=300):
    """Run a shell script inside a lab host; returns CompletedProcess (stdout+stderr merged)."""
    r = subprocess.run([str(PODMAN), "exec", container, "/bin/sh", "-c", script],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    if check:
        assert r.returncode == 0, f"{container}: `{script}` -> {r.returncode}\n{r.stdout}"
    return r


def boot_marker(container):
    return hx(container, "cut -d' ' -f22 /proc/1/stat").stdout.strip()


def reboot(name):
    """systemctl reboot inside the host; wait for the new boot. Returns (old, new) markers."""
    cname = container(name)
    before = boot_marker(cname)
    hx(cname, "systemctl reboot", check=False)
    hostctl("wait-boot", name, "--after", before, "--timeout", "120")
    after = boot_marker(cname)
    assert after != before
    return before, after


def dpkg_version(container, pkg):
    return hx(container, f"dpkg-query -W -f='${{Version}}' {pkg}").stdout.strip()


@pytest.fixture
def scratch(lab_kubeconfig):
    """A fresh scratch host factory: spawn(kernel=..., driver=...) -> container name."""
    made = []

    def spawn(kernel=None, driver=None, devices=2, services=()):
        name = f"scratch-{uuid.uuid4().hex[:6]}"
        args = ["spawn", name, "--devices", str(devices)]
        for unit in services:
            args += ["--service", unit]
        if kernel:
            args += ["--kernel", kernel]
        if driver:
            args += ["--driver", driver]
        made.append(name)
        return hostctl(*args).splitlines()[-1]

    yield spawn
    for name in made:
        subprocess.run([str(HOSTCTL), "rm", name], capture_output=True,
                       env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())), check=False)


def nv_install(version):
    full = f"{version}-0ubuntu1"
    return ("DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            + " ".join(f"{p}={full}" for p in NV_PKGS))


def test_apt_install_chosen_version_and_hold(scratch):
    c = scratch(kernel=K_OLD)
    hx(c, "apt-get update -qq")
    hx(c, nv_install(V_OLD))
    for p in NV_PKGS:
        assert dpkg_version(c, p) == f"{V_OLD}-0ubuntu1"
    assert "nvidia/%s, %s, x86_64: installed" % (V_OLD, K_OLD) in hx(c, "dkms status").stdout
    hx(c, "apt-mark hold " + " ".join(NV_PKGS))
    out = hx(c, "DEBIAN_FRONTEND=noninteractive apt-get upgrade -y").stdout
    assert "kept back" in out or "held" in out, out
    for p in NV_PKGS:
        assert dpkg_version(c, p) == f"{V_OLD}-0ubuntu1", out
    # without the holds the same command upgrades (the hold was what kept them)
    hx(c, "apt-mark unhold " + " ".join(NV_PKGS))
    hx(c, "DEBIAN_FRONTEND=noninteractive apt-get upgrade -y")
    assert dpkg_version(c, "nvidia-utils-580-server") == f"{V_NEW}-0ubuntu1"


def test_incident_replay(scratch):
    """domain.md incident: u-u upgrades userspace + kernel; mismatch; reboot; stale ip_vs index."""
    c = scratch(kernel=K_OLD, driver=V_OLD)
    name = host_of(c)
    # the kernel comes from the linux-generic meta package, as on the real workers
    hx(c, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-generic=5.15.0.177.161 "
          "linux-image-generic=5.15.0.177.161 linux-headers-generic=5.15.0.177.161")
    assert hx(c, "uname -r").stdout.strip() == K_OLD
    assert hx(c, "cat /sys/module/nvidia/version").stdout.strip() == V_OLD
    assert hx(c, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split() == [V_OLD] * 2

    hx(c, "unattended-upgrade")
    hist = hx(c, "cat /var/log/apt/history.log").stdout
    assert "Commandline: /usr/bin/unattended-upgrade" in hist
    assert f"nvidia-utils-580-server:amd64 ({V_OLD}-0ubuntu1, {V_NEW}-0ubuntu1)" in hist
    assert f"linux-image-{K_NEW}:amd64" in hist
    smi = hx(c, "nvidia-smi", check=False)
    assert smi.returncode == 18
    assert smi.stdout.splitlines() == ["Failed to initialize NVML: Driver/library version mismatch",
                                       "NVML library version: 580.159"]
    assert hx(c, "cat /sys/module/nvidia/version").stdout.strip() == V_OLD
    assert hx(c, f"modinfo -k {K_NEW} -F version nvidia").stdout.strip() == V_NEW
    assert hx(c, "test -f /var/run/reboot-required")

    reboot(name)
    assert hx(c, "uname -r").stdout.strip() == K_NEW
    assert hx(c, "python3 -c 'import os; print(os.uname().release)'").stdout.strip() == K_NEW
    assert hx(c, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split() == [V_NEW] * 2
    assert hx(c, "cat /sys/module/nvidia/version").stdout.strip() == V_NEW
    # C7: the .ko and the modules.dep line exist, the index modprobe reads is stale
    assert hx(c, f"test -f /lib/modules/{K_NEW}/kernel/net/netfilter/ipvs/ip_vs.ko")
    assert "ipvs/ip_vs.ko:" in hx(c, f"cat /lib/modules/{K_NEW}/modules.dep").stdout
    r = hx(c, "modprobe ip_vs", check=False)
    assert r.returncode == 1
    assert f"Module ip_vs not found in directory /lib/modules/{K_NEW}" in r.stdout
    assert hx(c, "modprobe -n ip_vs", check=False).returncode == 1
    hx(c, f"depmod -a {K_NEW}")
    hx(c, "modprobe -n ip_vs && modprobe ip_vs")
    assert "ip_vs" in hx(c, "lsmod").stdout.split()


def test_rmmod_nvidia_in_use(scratch):
    c = scratch(kernel=K_OLD, driver=V_OLD)
    hx(c, "rmmod nvidia_drm nvidia_modeset nvidia_uvm")  # dependents (holders) first
    hx(c, "sleep 300 < /dev/nvidia0 > /dev/null 2>&1 & echo $! > /run/holder.pid")
    time.sleep(0.5)
    r = hx(c, "rmmod nvidia", check=False)
    assert r.returncode == 1 and "rmmod: ERROR: Module nvidia is in use" in r.stdout, r.stdout
    assert hx(c, "cat /sys/module/nvidia/version").stdout.strip() == V_OLD
    hx(c, "kill $(cat /run/holder.pid); sleep 0.3")
    hx(c, "rmmod nvidia")
    assert hx(c, "test -e /sys/module/nvidia", check=False).returncode == 1
    smi = hx(c, "nvidia-smi", check=False)
    assert smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout


def test_persistenced_holds_the_device_and_fails_like_the_real_daemon(scratch):
    c = scratch(kernel=K_OLD, driver=V_OLD, services=["nvidia-persistenced"])
    assert hx(c, "systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    # it keeps /dev/nvidiactl open: the main module cannot go while it runs
    hx(c, "rmmod nvidia_drm nvidia_modeset nvidia_uvm")
    r = hx(c, "rmmod nvidia", check=False)
    assert r.returncode == 1 and "Module nvidia is in use" in r.stdout, r.stdout
    hx(c, "systemctl stop nvidia-persistenced && rmmod nvidia")
    # no module: it does not start, with the real daemon's words
    r = hx(c, "systemctl start nvidia-persistenced", check=False)
    assert r.returncode != 0
    assert "failed to initialize" in hx(c, "journalctl -u nvidia-persistenced --no-pager", check=False).stdout
    # userspace of another version than the loaded module: NVRM API mismatch, not started
    hx(c, "modprobe nvidia && " + nv_install(V_NEW))
    r = hx(c, "systemctl start nvidia-persistenced", check=False)
    assert r.returncode != 0
    log = hx(c, "journalctl -u nvidia-persistenced --no-pager", check=False).stdout
    assert f"the client has the version {V_NEW}, but this kernel module has the version {V_OLD}" in log, log


def test_hosts_boot_running_with_their_own_machine_id(scratch):
    """A host boots clean: systemd says "running", not "degraded", after its provisioning reboot and
    after another reboot. Its machine-id is the one hostctl wrote for it, in /etc itself and not a
    mount point, so systemd-machine-id-commit.service is skipped (condition), not failed."""
    c = scratch(kernel=K_OLD, driver=V_OLD)  # created (hostctl asserts "running"), provisioned, rebooted
    name = host_of(c)
    mid = (lab_dir() / "hosts" / name / "etc-machine-id").read_text().strip()
    assert len(mid) == 32, mid
    for when in ("after provisioning", "after a reboot"):
        if when == "after a reboot":
            reboot(name)
        state = hx(c, "timeout 60 systemctl is-system-running --wait", check=False).stdout.strip()
        failed = hx(c, "systemctl --failed --no-legend --plain", check=False).stdout
        assert state == "running", f"{when}: systemd says {state!r}; failed units:\n{failed}"
        assert hx(c, "cat /etc/machine-id").stdout.strip() == mid, when
        assert hx(c, "awk '$5 == \"/etc/machine-id\"' /proc/1/mountinfo").stdout == "", when
        commit = sorted(hx(c, "systemctl show -p ActiveState -p ConditionResult "
                              "systemd-machine-id-commit.service").stdout.split())
        assert commit == ["ActiveState=inactive", "ConditionResult=no"], f"{when}: {commit}"


@pytest.fixture
def node_host(core_v1, lab_kubeconfig):
    """A scratch host standing behind its own kwok Node (so the shared scenario Nodes are left
    alone): the Node is created like labctl creates nodes, the host with `hostctl spawn --node`."""
    from kubernetes.client.rest import ApiException
    from lablib import nodes

    name = f"lab-hosttest-{uuid.uuid4().hex[:5]}"
    core_v1.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "type": "kwok",
                                nodes.HEARTBEAT_LABEL: "on"}},
        "spec": {},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"},
                   "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"}}})
    try:
        nodes.wait_node_ready(core_v1, name, True, timeout=60)
        hostctl("spawn", name, "--node", "--kernel", "5.15.0-119-generic", "--driver", "550.90.07")
        yield name
    finally:
        subprocess.run([str(HOSTCTL), "rm", name], capture_output=True,
                       env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())), check=False)
        try:
            core_v1.delete_node(name)
        except ApiException:
            pass


def wait_label(core_v1, name, key, value, timeout=30):
    deadline = time.time() + timeout
    while True:
        labels = core_v1.read_node(name).metadata.labels or {}
        if labels.get(key) == value:
            return labels
        assert time.time() < deadline, f"{name}: label {key}={labels.get(key)!r}, want {value!r}"
        time.sleep(1)


def test_reboot_node_notready_ready_and_ansible_reboot(core_v1, node_host, tmp_path):
    from lablib import nodes

    name, c = node_host, container(node_host)
    # the agent publishes the host's state on its Node (GFD/NFD-style labels, nodeInfo)
    wait_label(core_v1, name, "feature.node.kubernetes.io/kernel-version.full", "5.15.0-119-generic")
    wait_label(core_v1, name, "nvidia.com/cuda.driver.major", "550")
    nodes.wait_node_ready(core_v1, name, True, timeout=60)

    before = boot_marker(c)
    t0 = time.monotonic()
    hx(c, "systemctl reboot", check=False)
    nodes.wait_node_ready(core_v1, name, False, timeout=120)
    t_notready = time.monotonic() - t0
    nodes.wait_node_ready(core_v1, name, True, timeout=120)
    t_ready = time.monotonic() - t0
    after = boot_marker(c)
    assert after != before
    print(f"NotReady after {t_notready:.0f}s, Ready again after {t_ready:.0f}s")

    # a driver change without reboot (module reload) is relabelled too, like GFD would
    hx(c, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q " + " ".join(
        f"{p}=580.126.09-0ubuntu1" for p in NV_PKGS))
    hx(c, "rmmod nvidia_drm nvidia_modeset nvidia_uvm nvidia && modprobe nvidia")
    wait_label(core_v1, name, "nvidia.com/cuda.driver.major", "580")

    # ansible.builtin.reboot over ssh with the lab inventory's boot_time_command (its group_vars
    # give the scratch host the ssh connection: 127.0.0.1 + the host's port from ports.json)
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  hosts:\n    {name}:\n")
    play = tmp_path / "reboot.yml"
    play.write_text(
        f"- hosts: {name}\n  gather_facts: true\n  tasks:\n"
        "    - ansible.builtin.assert:\n"
        "        that: [\"ansible_facts.kernel == '5.15.0-119-generic'\"]\n"
        "    - ansible.builtin.reboot:\n"
        "        boot_time_command: \"{{ npuops_fleet_boot_time_command }}\"\n"
        "        reboot_timeout: 180\n")
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    r = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"),
                        "-i", str(REPO / "inventories" / "lab"), "-i", str(inv), str(play)],
                       capture_output=True, text=True, timeout=400, env=env, cwd=REPO, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert boot_marker(c) != after
    nodes.wait_node_ready(core_v1, name, True, timeout=180)


def test_node_labels_follow_host_state(core_v1):
    """Every scenario host's Node carries the kernel/OS/driver labels of the host's state."""
    for name, driver_label in (("lab-node-0", "nvidia.com/cuda.driver.major"),
                               ("lab-npu-0", "rebellions.ai/driver-version.full")):
        c = container(name)
        r = subprocess.run([str(PODMAN), "container", "inspect", "-f",
                            "{{index .Config.Labels \"npuops-lab-dir\"}}", c],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            pytest.fail(f"scenario host {c} is not running (hostctl up)")
        if Path(r.stdout.strip()) != lab_dir().absolute():
            pytest.skip(f"{c} belongs to another lab ({r.stdout.strip()})")
        kernel = hx(c, "uname -r").stdout.strip()
        mod = "nvidia" if name.startswith("lab-node") else "rebellions"
        version = hx(c, f"cat /sys/module/{mod}/version").stdout.strip()
        deadline = time.time() + 30
        while True:
            labels = core_v1.read_node(name).metadata.labels
            want = version.split(".")[0] if mod == "nvidia" else version
            ok = (labels.get("feature.node.kubernetes.io/kernel-version.full") == kernel
                  and labels.get(driver_label) == want)
            if ok or time.time() > deadline:
                break
            time.sleep(2)
        assert ok, (name, kernel, version, labels)
        info = core_v1.read_node(name).status.node_info
        assert info.kernel_version == kernel


# ------------------------------------------------------------------ ssh transport
def ansible_adhoc(name, tmp_path, *args, timeout=120):
    """`ansible NAME -m ...` through inventories/lab (ssh) plus a one-host inventory for NAME."""
    inv = tmp_path / "scratch.yml"
    inv.write_text(f"all:\n  hosts:\n    {name}:\n")
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    env.update(NPUOPS_LAB_DIR=str(lab_dir()), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    t0 = time.monotonic()
    r = subprocess.run([str(REPO / ".venv" / "bin" / "ansible"), name, "-i", str(REPO / "inventories" / "lab"),
                        "-i", str(inv), *args], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=REPO, check=False)
    return r, time.monotonic() - t0


def test_ssh_unreachable_when_stopped_and_reboot(scratch, tmp_path):
    """The hosts are reached over real ssh (127.0.0.1:<port> -> the container's sshd, the lab's key):
    a stopped host is UNREACHABLE with ssh's own message, like a dead machine of a fleet, and
    reachable again once started; ansible.builtin.reboot works across the container restart."""
    c = scratch()
    name = host_of(c)
    port = int(hostctl("ssh-port", name))
    assert json.loads((lab_dir() / "ssh" / "ports.json").read_text())[name] == port
    r, _elapsed = ansible_adhoc(name, tmp_path, "-m", "ansible.builtin.ping")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    # it really is sshd: the command runs in an sshd session of root, on the forwarded port
    r, _elapsed = ansible_adhoc(name, tmp_path, "-m", "ansible.builtin.command", "-a", "printenv SSH_CONNECTION")
    assert r.returncode == 0 and r.stdout.rstrip().endswith(" 22"), r.stdout + r.stderr
    # password logins are refused: root logs in with the lab key only
    pw = subprocess.run(["ssh", "-p", str(port), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                         "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no", "root@127.0.0.1", "true"],
                        capture_output=True, text=True, timeout=30, check=False)
    assert pw.returncode == 255 and "Permission denied" in pw.stderr, pw.stderr

    stop = subprocess.run([str(PODMAN), "stop", "-t", "10", c], capture_output=True, text=True, timeout=60,
                          check=False)
    assert stop.returncode == 0, stop.stderr
    r, took = ansible_adhoc(name, tmp_path, "-vvv", "-m", "ansible.builtin.ping")
    out = r.stdout + r.stderr
    assert r.returncode == 4, out[-4000:]  # ansible's rc for unreachable hosts
    assert "UNREACHABLE!" in out and '"unreachable": true' in out, out[-4000:]
    assert f"ssh: connect to host 127.0.0.1 port {port}: Connection refused" in out, out[-4000:]
    assert "deserialization" not in out, out[-4000:]
    # "at once": ssh's own refusal on its one and only attempt (no ssh_retry), with a bounded connect
    # (the inventory's ConnectTimeout), not a wait for some timeout; counted from ansible's -vvv log.
    execs = [line for line in out.splitlines() if "SSH: EXEC ssh " in line]
    assert len(execs) == 1 and "ConnectTimeout=5" in execs[0], execs
    assert "ssh_retry: attempt" not in out, [line for line in out.splitlines() if "ssh_retry" in line]
    print(f"UNREACHABLE reported after {took:.1f}s (whole ansible run)")

    start = subprocess.run([str(PODMAN), "start", c], capture_output=True, text=True, timeout=60, check=False)
    assert start.returncode == 0, start.stderr
    hostctl("wait-boot", name, "--timeout", "120")
    r, _elapsed = ansible_adhoc(name, tmp_path, "-m", "ansible.builtin.ping")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr

    # reboot over ssh: the master connection dies with the container, the module reconnects
    before = boot_marker(c)
    r, took = ansible_adhoc(name, tmp_path, "-m", "ansible.builtin.reboot", "-a",
                            "boot_time_command={{ npuops_fleet_boot_time_command }} reboot_timeout=180",
                            timeout=300)
    assert r.returncode == 0 and '"rebooted": true' in r.stdout, r.stdout + r.stderr
    assert boot_marker(c) != before
    print(f"ansible.builtin.reboot over ssh: {took:.1f}s")
