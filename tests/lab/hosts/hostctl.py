#!/usr/bin/env python3
"""Lab part 2: systemd GPU/NPU hosts in podman behind the lab's Nodes.

  hostctl build            build (or reuse) the host image and the apt repository
  hostctl up               build if needed, start + provision the scenario's hosts, start the agent
  hostctl down             stop the agent, remove the hosts' containers and state
  hostctl status           hosts, booted kernel, loaded driver, agent
  hostctl spawn NAME [--accelerator nvidia|rbln|none] [--devices N] [--os 22.04|24.04]
                           [--kernel R] [--driver V] [--packaging dkms|precompiled|cuda-repo|cuda-repo-open]
                           [--service UNIT]... [--node]
                           scratch host for tests; with --node the agent keeps it behind the
                           (existing) Node NAME
  hostctl rm NAME          remove one host (scratch or scenario)
  hostctl provision NAME   (re)install the scenario's kernel + driver on a host and reboot it
  hostctl wait-boot NAME [--after MARKER] [--timeout S]   wait until the host has booted
  hostctl ssh-port NAME    the host's loopback ssh port (also in $NPUOPS_LAB_DIR/ssh/ports.json)

SSH: every host runs sshd; root logs in with the per-lab key $NPUOPS_LAB_DIR/ssh/id_ed25519 over
127.0.0.1:<port> (podman bridge network + port forward); $NPUOPS_LAB_DIR/ssh/config has a Host
entry per host (`ssh -F $NPUOPS_LAB_DIR/ssh/config lab-node-0`).

Environment: NPUOPS_LAB_DIR (state, default /tmp/npuops-lab), KUBECONFIG (for the node agent),
NPUOPS_LAB_PORT_OFFSET (shifts the ssh ports, as labctl's),
NPUOPS_LAB_CACHE (default ~/.cache/npuops-lab), NPUOPS_LAB_SCENARIO (default tests/lab/scenario.yaml).
"""
import argparse
import concurrent.futures
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
os.environ.setdefault("CONTAINERS_CONF", os.path.join(HERE, "containers.conf"))
STATE = os.path.abspath(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))
CACHE = os.environ.get("NPUOPS_LAB_CACHE", os.path.expanduser("~/.cache/npuops-lab"))
SCENARIO = os.environ.get("NPUOPS_LAB_SCENARIO", os.path.join(ROOT, "tests", "lab", "scenario.yaml"))
HOSTS_DIR = os.path.join(STATE, "hosts")
SSH_DIR = os.path.join(STATE, "ssh")
# ssh port of host NAME: 13000 + offset + slot, slot = crc32(NAME) % 100, probing to the next free
# slot on a collision (recorded in ssh/ports.json until `rm`/`down`; the same name gets the same
# port again unless its slot was taken meanwhile).
# 100 slots: labs shifted by NPUOPS_LAB_PORT_OFFSET=100, 200, ... never overlap.
SSH_PORT_BASE = 13000 + int(os.environ.get("NPUOPS_LAB_PORT_OFFSET", "0"))
SSH_PORT_SLOTS = 100
# the lab's own ssh options: host keys are generated per container at first boot and change with
# every recreated host, so checking them is off (lab only, never on a fleet)
SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes"]
# Container names carry the lab's port offset when it has one: two labs side by side (two
# NPUOPS_LAB_DIRs, two offsets) never name - and so never replace or remove - each other's hosts.
_LAB_OFFSET = int(os.environ.get("NPUOPS_LAB_PORT_OFFSET", "0"))
PREFIX = "npuops-" if _LAB_OFFSET == 0 else "npuops-o%d-" % _LAB_OFFSET
IMAGE = "localhost/npuops-lab-host"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ["systemd", "systemd-sysv", "dbus", "python3", "apt", "apt-utils",
                 "unattended-upgrades", "kmod", "psmisc", "procps", "openssh-server",
                 # the real exporter: its textfile collector reads /var/lib/prometheus/node-exporter
                 "prometheus-node-exporter"]
KMOD_TOOLS = ["/sbin/modprobe", "/sbin/rmmod", "/sbin/insmod", "/sbin/lsmod", "/sbin/depmod",
              "/sbin/modinfo", "/bin/lsmod"]
OS = {  # VERSION_ID -> (codename, VERSION, PRETTY_NAME default)
    "22.04": ("jammy", "22.04.4 LTS (Jammy Jellyfish)", "Ubuntu 22.04.4 LTS"),
    "24.04": ("noble", "24.04.1 LTS (Noble Numbat)", "Ubuntu 24.04.1 LTS"),
}
DEFAULT_HOSTS = {
    "lab-node-0": {"accelerator": "nvidia", "devices": 8, "os": "22.04",
                   "kernel": "5.15.0-119-generic", "driver": "550.90.07"},
    "lab-node-1": {"accelerator": "nvidia", "devices": 8, "os": "22.04",
                   "kernel": "5.15.0-107-generic", "driver": "535.183.06",
                   # a vendor service that holds the device open: a window must stop it before the
                   # module unload and bring it back after (the fault suite's "services" invariant)
                   "services": ["nvidia-persistenced"]},
    "lab-node-2": {"accelerator": "nvidia", "devices": 8, "os": "24.04",
                   "kernel": "6.8.0-45-generic", "driver": "550.90.07"},
    "lab-npu-0": {"accelerator": "rbln", "devices": 4, "os": "22.04",
                  "kernel": "6.8.0-90-generic", "driver": "2.4.0"},
}


def log(msg):
    sys.stderr.write("[hostctl %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def run(cmd, check=True, capture=False, input=None, quiet=False):
    r = subprocess.run(cmd, input=input, text=True,
                       stdout=subprocess.PIPE if capture or quiet else None,
                       stderr=subprocess.PIPE if quiet else None, check=False)
    if check and r.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s" % (
            r.returncode, " ".join(cmd), (r.stderr or "") if quiet else ""))
    return r


def podman(*args, **kw):
    return run(["podman"] + list(args), **kw)


# ------------------------------------------------------------------ build (cached)
def tree_hash(paths, extra=""):
    h = hashlib.sha256(extra.encode())
    for base in paths:
        if os.path.isfile(base):
            h.update(base.encode())
            h.update(open(base, "rb").read())
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for fn in sorted(filenames):
                p = os.path.join(dirpath, fn)
                h.update(os.path.relpath(p, base).encode())
                h.update(str(os.stat(p).st_mode & 0o777).encode())
                if os.path.islink(p):
                    h.update(os.readlink(p).encode())
                else:
                    h.update(open(p, "rb").read())
    return h.hexdigest()[:16]


def build_rootfs():
    key = hashlib.sha256(("bookworm minbase " + ",".join(BASE_PACKAGES) + MIRROR).encode()).hexdigest()[:16]
    out = os.path.join(CACHE, "rootfs-" + key)
    if os.path.isfile(os.path.join(out, ".complete")):
        return out
    log("debootstrap bookworm -> %s (cold build, ~1-2 min)" % out)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(CACHE, exist_ok=True)
    run(["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
         "bookworm", tmp, MIRROR], quiet=True)
    open(os.path.join(tmp, ".complete"), "w").close()
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out


# customisation of the debootstrap root (run in a chroot at image build)
IMAGE_SCRIPT = """set -e
for t in %s; do
  dpkg-divert --local --rename --divert $t.kmod-real --add $t >/dev/null
  ln -sf /usr/local/lib/npuops-lab/kmodsim.py $t
done
echo /usr/local/lib/npuops-lab/uname_shim.so > /etc/ld.so.preload
rm -f /etc/apt/sources.list
mkdir -p /srv/npuops-lab-repo /var/lib/npuops-lab/host
systemctl enable npuops-lab-boot.service >/dev/null 2>&1
# the lab runs unattended-upgrade explicitly; the periodic timers stay off so tests are deterministic
systemctl disable apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true
systemctl mask getty@tty1.service console-getty.service >/dev/null 2>&1 || true
systemctl set-default multi-user.target >/dev/null 2>&1
# sshd: host keys are made at each container's first boot (ssh.service drop-in), not shared by all;
# pam_loginuid cannot write /proc/self/loginuid without CAP_AUDIT_CONTROL (refused in a container)
rm -f /etc/ssh/ssh_host_*
sed -i 's/^session[[:space:]]*required[[:space:]]*pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd
systemctl enable ssh.service >/dev/null 2>&1
: > /etc/machine-id
rm -rf /var/cache/apt/*.bin /var/lib/apt/lists/*
""" % " ".join(KMOD_TOOLS)


def image_tag():
    return tree_hash([os.path.join(HERE, "image")], ",".join(BASE_PACKAGES) + IMAGE_SCRIPT)


def build_image():
    tag = image_tag()
    ref = "%s:%s" % (IMAGE, tag)
    if podman("image", "exists", ref, check=False).returncode == 0:
        return ref
    rootfs = build_rootfs()
    t0 = time.time()
    work = os.path.join(CACHE, "work-" + tag)
    shutil.rmtree(work, ignore_errors=True)
    run(["cp", "-a", rootfs, work])
    try:
        os.unlink(os.path.join(work, ".complete"))
        run(["cp", "-a", os.path.join(HERE, "image", "overlay") + "/.", work])
        lib = os.path.join(work, "usr/local/lib/npuops-lab")
        run(["gcc", "-O2", "-shared", "-fPIC", "-o", os.path.join(lib, "uname_shim.so"),
             os.path.join(HERE, "image", "uname_shim.c"), "-ldl"])
        script = IMAGE_SCRIPT
        run(["chroot", work, "/bin/sh", "-c", script])
        log("importing image %s" % ref)
        tar = subprocess.Popen(["tar", "--numeric-owner", "--xattrs", "-C", work, "-c", "."],
                               stdout=subprocess.PIPE)
        imp = subprocess.run(["podman", "import", "--change", "CMD=/sbin/init", "--change",
                              "STOPSIGNAL=SIGRTMIN+3", "-", ref], stdin=tar.stdout,
                             stdout=subprocess.DEVNULL, check=False)
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise RuntimeError("podman import failed")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    podman("tag", ref, IMAGE + ":latest", check=False)
    log("image %s built in %.0fs" % (ref, time.time() - t0))
    return ref


def build_repo():
    key = tree_hash([os.path.join(HERE, "repo")])
    out = os.path.join(CACHE, "repo-" + key)
    if not os.path.isdir(out):
        log("building apt repository -> %s" % out)
        run([sys.executable, os.path.join(HERE, "repo", "build_repo.py"), out])
    return out


# ------------------------------------------------------------------ scenario
def scenario_hosts():
    """{name: host spec} for scenario nodes that have a host: block (and are not join nodes)."""
    try:
        import yaml
        with open(SCENARIO) as f:
            sc = yaml.safe_load(f) or {}
    except (OSError, ImportError):
        sc = {}
    hosts = {}
    nodes = sc.get("nodes") or []
    for n in nodes:
        h = n.get("host")
        if not h or n.get("join"):
            continue
        spec = dict(h)
        spec.setdefault("os_image", (n.get("nodeInfo") or {}).get("osImage"))
        hosts[n["name"]] = spec
    if not nodes:
        hosts = {k: dict(v) for k, v in DEFAULT_HOSTS.items()}
    return hosts


def packages_for(spec):
    pk = []
    if spec.get("kernel"):
        # headers too, as Ubuntu's linux-generic brings them: DKMS builds the driver against them
        pk += ["linux-image-" + spec["kernel"]]
        if spec.get("headers", spec.get("packaging") != "precompiled"):  # precompiled modules need none
            pk += ["linux-headers-" + spec["kernel"]]
    v = spec.get("driver")
    if v and spec.get("accelerator") == "nvidia":
        full = v + "-0ubuntu1"
        b = v.split(".")[0]
        userspace = ("nvidia-utils-%s-server" % b, "nvidia-compute-utils-%s-server" % b,
                     "libnvidia-compute-%s-server" % b, "libnvidia-common-%s-server" % b)
        if spec.get("packaging") == "precompiled":
            # Ubuntu's precompiled flavour: the signed per-kernel module package, no DKMS
            pk += ["%s=%s" % (p, full) for p in ("nvidia-kernel-common-%s-server" % b,) + userspace]
            pk += ["linux-modules-nvidia-%s-server-open-%s" % (b, spec["kernel"])]
        elif spec.get("packaging") in ("cuda-repo", "cuda-repo-open"):
            # NVIDIA's CUDA repository, as the product names it: the meta (V-1) and its closure (V-0ubuntu1)
            o = "-open" if spec["packaging"] == "cuda-repo-open" else ""
            pk += ["%s-%s=%s-1" % ("nvidia-open" if o else "cuda-drivers", b, v)]
            pk += ["%s=%s" % (p, full) for p in (
                "nvidia-driver-%s%s" % (b, o), "nvidia-dkms-%s%s" % (b, o), "nvidia-kernel-common-" + b,
                "libnvidia-compute-" + b, "nvidia-utils-" + b, "nvidia-compute-utils-" + b)]
        else:
            pk += ["%s=%s" % (p, full) for p in (
                "nvidia-driver-%s-server-open" % b, "nvidia-dkms-%s-server-open" % b) + userspace]
    elif v and spec.get("accelerator") == "rbln":
        pk += ["rbln-driver=%s-1" % v]
    return pk


# ------------------------------------------------------------------ hosts
def cname(name):
    return PREFIX + name


def hostdir(name):
    return os.path.join(HOSTS_DIR, name)


def os_release(spec):
    vid = str(spec.get("os", "22.04"))
    code, ver, pretty = OS.get(vid, OS["22.04"])
    pretty = spec.get("os_image") or pretty
    return ('PRETTY_NAME="%s"\nNAME="Ubuntu"\nVERSION_ID="%s"\nVERSION="%s"\n'
            'VERSION_CODENAME=%s\nID=ubuntu\nID_LIKE=debian\nHOME_URL="https://www.ubuntu.com/"\n'
            'UBUNTU_CODENAME=%s\n# npuops lab: simulated OS identity (userland: bookworm)\n'
            % (pretty, vid, ver, code, code)), code


def ensure_ssh_key():
    """The lab's key pair (root's login on every host); the public half is bind-mounted."""
    key = os.path.join(SSH_DIR, "id_ed25519")
    os.makedirs(SSH_DIR, mode=0o700, exist_ok=True)
    with open(os.path.join(SSH_DIR, ".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if not os.path.exists(key):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "npuops-lab@" + STATE,
                 "-f", key], quiet=True)
            shutil.copyfile(key + ".pub", os.path.join(SSH_DIR, "authorized_keys"))
    return key


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def ssh_port(name, allocate=True, release=False):
    """The host's loopback ssh port (deterministic per name; see SSH_PORT_BASE). release=True frees
    it (`rm`, `down`), so scratch hosts with fresh names do not use up the 100 slots."""
    os.makedirs(SSH_DIR, mode=0o700, exist_ok=True)
    path = os.path.join(SSH_DIR, "ports.json")
    with open(os.path.join(SSH_DIR, ".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            ports = json.load(open(path))
        except (OSError, ValueError):
            ports = {}
        if release:
            port = ports.pop(name, None)
        elif name in ports or not allocate:
            return ports.get(name)
        else:
            port = alloc_port(name, ports)
        with open(path + ".tmp", "w") as f:
            json.dump(ports, f, indent=1, sort_keys=True)
        os.rename(path + ".tmp", path)
        # ssh_config for people and scripts: `ssh -F $NPUOPS_LAB_DIR/ssh/config <host>`
        with open(os.path.join(SSH_DIR, "config.tmp"), "w") as f:
            for n, p in sorted(ports.items()):
                f.write("Host %s\n  HostName 127.0.0.1\n  Port %d\n" % (n, p))
            f.write("Host *\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n%s" % (
                os.path.join(SSH_DIR, "id_ed25519"),
                "".join("  %s\n" % o.replace("=", " ") for o in SSH_OPTS[1::2])))
        os.rename(os.path.join(SSH_DIR, "config.tmp"), os.path.join(SSH_DIR, "config"))
        return port


def alloc_port(name, ports):
    used = set(ports.values())
    slot = zlib.crc32(name.encode()) % SSH_PORT_SLOTS
    for i in range(SSH_PORT_SLOTS):
        port = SSH_PORT_BASE + (slot + i) % SSH_PORT_SLOTS
        if port not in used and port_free(port):
            break
    else:
        raise RuntimeError("no free ssh port in %d..%d" % (SSH_PORT_BASE, SSH_PORT_BASE + SSH_PORT_SLOTS - 1))
    ports[name] = port
    return port


def ssh_cmd(name, *command):
    return (["ssh", "-i", ensure_ssh_key(), "-p", str(ssh_port(name)), *SSH_OPTS, "root@127.0.0.1"]
            + list(command))


def wait_ssh(name, timeout=30):
    """sshd answers with the lab key (what Ansible needs); after wait_boot it normally does at once."""
    t0 = time.time()
    while True:
        r = run(ssh_cmd(name, "true"), check=False, quiet=True)
        if r.returncode == 0:
            return
        if time.time() - t0 > timeout:
            raise RuntimeError("%s: ssh to 127.0.0.1:%s failed: %s" % (name, ssh_port(name), r.stderr))
        time.sleep(0.5)


def create_host(name, spec, image, repo, node=True):
    d = hostdir(name)
    key = ensure_ssh_key()
    port = ssh_port(name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "sysmodule"))
    acc = spec.get("accelerator", "none")
    with open(os.path.join(d, "hw.conf"), "w") as f:
        f.write("ACCEL=%s\nDEVICES=%d\n" % (acc, int(spec.get("devices", 0 if acc == "none" else 2))))
        if spec.get("gpu_name"):
            f.write('GPU_NAME="%s"\n' % spec["gpu_name"])
        if spec.get("npu_name"):
            f.write('NPU_NAME="%s"\n' % spec["npu_name"])
    osr, code = os_release(spec)
    with open(os.path.join(d, "os-release"), "w") as f:
        f.write(osr)
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(spec, f)
    # each machine its own machine-id, as every installed host has (systemd would derive the same one
    # for every container of this machine); written into the container's /etc before its first boot,
    # as an installer does. Not bind-mounted: /etc/machine-id would be a mount point, so
    # systemd-machine-id-commit.service would run, find it on no tmpfs, fail, and every host would
    # boot "degraded".
    mid = os.path.join(d, "etc-machine-id")
    with open(mid, "w") as f:
        f.write(uuid.uuid4().hex + "\n")
    podman("rm", "-f", "-v", cname(name), check=False, quiet=True)
    podman("create", "--name", cname(name), "--hostname", name,
           "--systemd=always", "--restart=always",
           # a real TCP path for ssh: CNI bridge + loopback-only port forward (see README)
           "--network=bridge", "-p", "127.0.0.1:%d:22" % port,
           "--label", "npuops-lab-host=" + name, "--label", "npuops-lab-dir=" + STATE,
           # hosts the node agent keeps behind their Node (a Node of that name must exist)
           *(["--label", "npuops-lab-agent=" + STATE] if node else []),
           "-v", "%s:/var/lib/npuops-lab/host" % d,
           "-v", "%s:/sys/module" % os.path.join(d, "sysmodule"),
           # a real-packaging host (tests/lab/realpkg) takes its apt source from that lab's mirror
           "-v", ("%s:/srv/npuops-realpkg-mirror:ro" % spec["apt_mirror"]) if spec.get("apt_mirror")
           else ("%s:/srv/npuops-lab-repo:ro" % repo),
           "-v", "%s:/etc/ssh/npuops-lab_authorized_keys:ro" % (os.path.join(os.path.dirname(key), "authorized_keys")),
           image, "/sbin/init", quiet=True)
    podman("cp", mid, "%s:/etc/machine-id" % cname(name), quiet=True)
    podman("start", cname(name), quiet=True)
    # a fresh lab host (the image's units only, nothing installed yet) boots clean: "running", not
    # "degraded"; a real-packaging host boots Debian's own driver units, whose state its tests judge
    wait_boot(name, timeout=60, require_running=not spec.get("apt_mirror"))
    if spec.get("apt_mirror"):
        # Debian bookworm as debootstrap made it: its own os-release (the node agent's too), the
        # mirror's apt source
        with open(os.path.join(d, "os-release"), "w") as f:
            f.write(hexec(name, "cat /etc/os-release").stdout)
        return
    # simulated OS identity + the lab apt source for that codename
    vid = str(spec.get("os", "22.04"))
    hexec(name, "rm -f /etc/os-release && cp /var/lib/npuops-lab/host/os-release /etc/os-release && "
          "printf 'DISTRIB_ID=Ubuntu\\nDISTRIB_RELEASE=%s\\nDISTRIB_CODENAME=%s\\n"
          "DISTRIB_DESCRIPTION=\"%s\"\\n' > /etc/lsb-release && " % (
              vid, code, spec.get("os_image") or OS.get(vid, OS["22.04"])[2]) +
          "echo 'deb [trusted=yes] file:/srv/npuops-lab-repo %s main' "
          "> /etc/apt/sources.list.d/npuops-lab.list" % code)


def hexec(name, script, check=True, capture=True):
    r = podman("exec", cname(name), "/bin/sh", "-c", script, check=False, capture=capture)
    if check and r.returncode != 0:
        raise RuntimeError("%s: `%s` failed (%d): %s" % (name, script, r.returncode,
                                                         (r.stdout or "")[-2000:]))
    return r


def boot_marker(name):
    try:
        with open(os.path.join(hostdir(name), "ready")) as f:
            return f.read().strip()
    except OSError:
        return None


def wait_boot(name, after=None, timeout=90, require_running=False):
    """Wait until the host has booted (ready marker written, != after) and systemd is up: its boot
    finished ``running``, or ``degraded`` (a unit failed: after a reboot into a kernel without its
    driver, the vendor's services fail as on a real host) unless ``require_running``. Each
    ``systemctl is-system-running --wait`` is bounded by the time left."""
    t0 = time.time()
    state = "(no boot marker)"
    while time.time() - t0 < timeout:
        m = boot_marker(name)
        if m and m != after:
            left = max(1, int(timeout - (time.time() - t0)))
            r = podman("exec", cname(name), "timeout", str(left), "systemctl", "is-system-running", "--wait",
                       check=False, capture=True, quiet=True)
            state = (r.stdout or "").strip() or "(exec rc %d)" % r.returncode
            if state == "running":
                return m
            if state == "degraded":
                if not require_running:
                    return m
                failed = podman("exec", cname(name), "systemctl", "--failed", "--no-legend", "--plain",
                                check=False, capture=True, quiet=True)
                raise RuntimeError("host %s booted degraded, not running; failed units: %s" % (
                    name, " ".join(line.split()[0] for line in (failed.stdout or "").splitlines() if line.strip())
                    or "(none listed)"))
        time.sleep(0.5)
    raise TimeoutError("host %s did not boot within %ss (systemd: %s)" % (name, timeout, state))


def reboot(name, timeout=90):
    before = boot_marker(name)
    podman("exec", cname(name), "systemctl", "reboot", check=False, quiet=True)
    return wait_boot(name, after=before, timeout=timeout)


def provision(name, spec):
    pk = packages_for(spec)
    if pk:
        hexec(name, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
              "--no-install-recommends %s >/var/log/npuops-lab-provision.log 2>&1 || "
              "{ tail -30 /var/log/npuops-lab-provision.log; exit 1; }" % " ".join(pk))
        hexec(name, "rm -f /var/run/reboot-required /var/run/reboot-required.pkgs "
              "/var/log/apt/history.log /var/log/apt/term.log")
    if spec.get("services"):
        # enabled as a fleet's configuration management would; they start with the reboot below
        hexec(name, "systemctl enable %s" % " ".join(s + ".service" for s in spec["services"]))
    reboot(name)
    open(os.path.join(hostdir(name), "provisioned"), "w").write(json.dumps(spec))


def container_running(name):
    r = podman("container", "inspect", "-f", "{{.State.Running}}", cname(name), check=False,
               capture=True, quiet=True)
    return r.returncode == 0 and r.stdout.strip() == "true"


def container_image(name):
    r = podman("container", "inspect", "-f", "{{.ImageName}}", cname(name), check=False,
               capture=True, quiet=True)
    return r.stdout.strip() if r.returncode == 0 else None


def start_host(name, spec, image, repo):
    d = hostdir(name)
    try:
        prov = json.load(open(os.path.join(d, "provisioned")))
    except (OSError, ValueError):
        prov = None
    if prov == spec and container_running(name) and container_image(name) == image:
        log("%s: already up" % name)
        return
    t0 = time.time()
    create_host(name, spec, image, repo)
    provision(name, spec)
    wait_ssh(name)
    log("%s: up (kernel %s, driver %s) in %.0fs" % (name, spec.get("kernel"), spec.get("driver"),
                                                    time.time() - t0))


# ------------------------------------------------------------------ agent
def agent_pidfile():
    return os.path.join(STATE, "nodeagent.pid")


def agent_pid():
    try:
        pid = int(open(agent_pidfile()).read().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def start_agent():
    if agent_pid():
        return
    kc = os.environ.get("KUBECONFIG") or os.path.join(STATE, "kubeconfig")
    if not os.path.exists(kc):
        log("no kubeconfig (%s): node agent not started" % kc)
        return
    env = dict(os.environ, KUBECONFIG=kc, NPUOPS_LAB_DIR=STATE)
    logf = open(os.path.join(STATE, "nodeagent.log"), "a")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "nodeagent.py")],
                         env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    with open(agent_pidfile(), "w") as f:
        f.write(str(p.pid))
    log("node agent started (pid %d, log %s)" % (p.pid, logf.name))


def stop_agent():
    pid = agent_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _attempt in range(50):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)
    try:
        os.unlink(agent_pidfile())
    except OSError:
        pass


# ------------------------------------------------------------------ commands
def cmd_build(a):
    t0 = time.time()
    img, repo = build_image(), build_repo()
    print("image %s\nrepo %s\n(%.0fs)" % (img, repo, time.time() - t0))


def cmd_up(a):
    t0 = time.time()
    os.makedirs(HOSTS_DIR, exist_ok=True)
    hosts = scenario_hosts()
    if os.environ.get("NPUOPS_LAB_HOSTS", "1") == "0" or not hosts:
        log("no hosts to start")
        return
    img, repo = build_image(), build_repo()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hosts)) as ex:
        futs = {ex.submit(start_host, n, s, img, repo): n for n, s in hosts.items()}
        errors = []
        for f in concurrent.futures.as_completed(futs):
            try:
                f.result()
            except Exception as e:  # noqa: BLE001
                errors.append("%s: %s" % (futs[f], e))
    if errors:
        raise SystemExit("hostctl up failed:\n" + "\n".join(errors))
    start_agent()
    log("%d hosts up in %.0fs" % (len(hosts), time.time() - t0))


def all_lab_containers():
    """Containers of THIS lab (state dir); another lab's hosts on the machine are left alone."""
    r = podman("ps", "-a", "--filter", "label=npuops-lab-dir=" + STATE, "--format", "{{.Names}}",
               check=False, capture=True, quiet=True)
    return [x for x in (r.stdout or "").split() if x]


def cmd_down(a):
    stop_agent()
    for c in all_lab_containers():
        podman("rm", "-f", "-v", "-t", "5", c, check=False, quiet=True)
        ssh_port(c[len(PREFIX):], release=True)
    shutil.rmtree(HOSTS_DIR, ignore_errors=True)
    log("hosts removed")


def cmd_status(a):
    names = [c[len(PREFIX):] for c in all_lab_containers()]
    print("agent: %s" % ("running (pid %d)" % agent_pid() if agent_pid() else "stopped"))
    for n in sorted(names):
        d = hostdir(n)
        kern = (open(os.path.join(d, "kernel-release")).read().strip()
                if os.path.exists(os.path.join(d, "kernel-release")) else "-")
        mods = []
        for m in ("nvidia", "rebellions"):
            p = os.path.join(d, "sysmodule", m, "version")
            if os.path.exists(p):
                mods.append("%s %s" % (m, open(p).read().strip()))
        print("%-14s %-8s ssh=127.0.0.1:%-5s boot=%-10s kernel=%-22s loaded=%s" % (
            n, "running" if container_running(n) else "down", ssh_port(n, allocate=False) or "-",
            boot_marker(n) or "-", kern,
            ", ".join(mods) or "-"))


def cmd_spawn(a):
    spec = {"accelerator": a.accelerator, "devices": a.devices, "os": a.os}
    if a.kernel:
        spec["kernel"] = a.kernel
    if a.driver:
        spec["driver"] = a.driver
    if a.service:
        spec["services"] = a.service
    if a.packaging != "dkms":
        spec["packaging"] = a.packaging
    if a.realpkg or a.realpkg_set:
        # Debian's real packages, a pinned driver set already built by the real dkms (realpkg/image.py)
        sys.path.insert(0, os.path.join(HERE, "..", "realpkg"))
        import image as realpkg_image  # noqa: E402  (the real-packaging lab's image builder)
        info = realpkg_image.build(a.realpkg_set or "before")
        img, repo = info["ref"], None
        spec.update({"os": "debian", "apt_mirror": info["mirror"], "kernel_release": info["kernel"]})
    else:
        img, repo = build_image(), build_repo()
    os.makedirs(HOSTS_DIR, exist_ok=True)
    create_host(a.name, spec, img, repo, node=a.node)
    if (a.kernel or a.driver) and "apt_mirror" not in spec:
        provision(a.name, spec)
    wait_ssh(a.name)
    if a.node:
        start_agent()
    print(cname(a.name))


def cmd_rm(a):
    podman("rm", "-f", "-v", "-t", "5", cname(a.name), check=False, quiet=True)
    shutil.rmtree(hostdir(a.name), ignore_errors=True)
    ssh_port(a.name, release=True)


def cmd_provision(a):
    spec = scenario_hosts().get(a.name) or json.load(open(os.path.join(hostdir(a.name), "spec.json")))
    provision(a.name, spec)


def cmd_ssh_port(a):
    print(ssh_port(a.name))


def cmd_wait_boot(a):
    print(wait_boot(a.name, after=a.after, timeout=a.timeout))


def main():
    p = argparse.ArgumentParser(prog="hostctl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build").set_defaults(fn=cmd_build)
    sub.add_parser("up").set_defaults(fn=cmd_up)
    sub.add_parser("down").set_defaults(fn=cmd_down)
    sub.add_parser("status").set_defaults(fn=cmd_status)
    s = sub.add_parser("spawn")
    s.add_argument("name")
    s.add_argument("--accelerator", default="nvidia", choices=["nvidia", "rbln", "none"])
    s.add_argument("--devices", type=int, default=2)
    s.add_argument("--os", default="22.04", choices=sorted(OS))
    s.add_argument("--kernel")
    s.add_argument("--driver")
    s.add_argument("--packaging", default="dkms", choices=["dkms", "precompiled", "cuda-repo", "cuda-repo-open"],
                   help="nvidia: Ubuntu's DKMS packages (default), its precompiled per-kernel modules, or NVIDIA's "
                        "CUDA repository (cuda-drivers-B / nvidia-open-B and their closure, DKMS)")
    s.add_argument("--service", action="append", default=[],
                   help="enable this systemd unit after the driver install (repeatable)")
    s.add_argument("--realpkg", action="store_true",
                   help="Debian's real NVIDIA packages and real dkms (tests/lab/realpkg): the image with the "
                        "pinned 'before' driver built, apt from that lab's mirror; --kernel/--driver/--os ignored")
    s.add_argument("--realpkg-set", metavar="SET",
                   help="with --realpkg: the pins.txt set installed and DKMS-built in the image (default before; "
                        "tesla470: Debian's Tesla 470 branch); implies --realpkg")
    s.add_argument("--node", action="store_true",
                   help="the node agent keeps this host behind the Node of the same name "
                        "(create the Node yourself, annotated kwok.x-k8s.io/node=fake)")
    s.set_defaults(fn=cmd_spawn)
    s = sub.add_parser("rm")
    s.add_argument("name")
    s.set_defaults(fn=cmd_rm)
    s = sub.add_parser("provision")
    s.add_argument("name")
    s.set_defaults(fn=cmd_provision)
    s = sub.add_parser("wait-boot")
    s.add_argument("name")
    s.add_argument("--after")
    s.add_argument("--timeout", type=float, default=90)
    s.set_defaults(fn=cmd_wait_boot)
    s = sub.add_parser("ssh-port")
    s.add_argument("name")
    s.set_defaults(fn=cmd_ssh_port)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
