"""labctl: a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) plus kwok fake nodes, on 127.0.0.1 only. Stdlib + PyYAML; talks to the cluster
through the kubectl built for the pinned release. Run through tests/lab/labctl."""
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

LAB = Path(__file__).resolve().parent.parent  # tests/lab
STATE = Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab")).absolute()
SCENARIO = Path(os.environ.get("NPUOPS_LAB_SCENARIO", LAB / "scenario.yaml")).absolute()
HOSTCTL = LAB / "hosts" / "hostctl"
KUBECONFIG = STATE / "kubeconfig"
# Fixed loopback ports, away from the defaults of a real cluster on the same machine.
# NPUOPS_LAB_PORT_OFFSET shifts all of them, so two labs (two NPUOPS_LAB_DIRs) can run side by side.
_OFF = int(os.environ.get("NPUOPS_LAB_PORT_OFFSET", "0"))
PORTS = {k: v + _OFF for k, v in {"etcd": 12379, "kube-apiserver": 16443, "kube-controller-manager": 16257,
                                  "kube-scheduler": 16259, "kwok": 16247}.items()}
ORDER = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
# Node lifecycle timing: kwok renews each node Lease every lease/4 = 5 s; the node-lifecycle
# controller marks a node whose Lease is older than the grace period NotReady/Unknown.
LEASE_S, GRACE, MONITOR = 20, "16s", "2s"
FAKE_ANN = ("kwok.x-k8s.io/node", "fake")
# kwok filters annotation selectors client-side and ignores a node that stops matching, so the
# annotation alone cannot take a node offline. A label selector is evaluated by the apiserver: a
# node whose label stops matching arrives as a watch DELETE and kwok stops renewing its Lease.
HEARTBEAT = ("lab.npuops.io/heartbeat", "on")  # lablib.nodes.set_node_online flips it on/off
SERVICE_CIDR, SERVICE_IP = "10.96.0.0/16", "10.96.0.1"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    log(f"labctl: {msg}")
    sys.exit(1)


# ---------------------------------------------------------------- build / binaries
def binaries():
    """Run build.sh (a no-op when the per-version cache is warm); returns {name: path}."""
    out = subprocess.run([str(LAB / "build.sh")], check=True, stdout=subprocess.PIPE, text=True).stdout
    dirs = dict(line.split("=", 1) for line in out.split() if "=" in line)
    k, e, w = Path(dirs["K8S_BIN"]), Path(dirs["ETCD_BIN"]), Path(dirs["KWOK_BIN"])
    return {"etcd": e / "etcd", "kube-apiserver": k / "kube-apiserver",
            "kube-controller-manager": k / "kube-controller-manager",
            "kube-scheduler": k / "kube-scheduler", "kubectl": k / "kubectl",
            "kwok": w / "kwok", "stages": w / "stages.yaml", "version": k.name}


# ---------------------------------------------------------------- certificates (openssl CLI)
def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_certs(pki):
    pki.mkdir(parents=True)
    ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", ca_key)
    # The extensions a cluster CA has (kubeadm's): Python >= 3.13 verifies strictly (VERIFY_X509_STRICT)
    # and refuses a CA without keyUsage or a leaf without authorityKeyIdentifier.
    openssl("req", "-x509", "-new", "-key", ca_key, "-days", "3650", "-subj", "/CN=npuops-lab-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
            "-addext", "subjectKeyIdentifier=hash", "-out", ca_crt)

    def leaf(name, subj, ext):
        key, csr, crt, extf = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
        extf.write_text("basicConstraints=critical,CA:FALSE\nauthorityKeyIdentifier=keyid,issuer\n" + ext)
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
        openssl("req", "-new", "-key", key, "-subj", subj, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
                "-days", "3650", "-extfile", extf, "-out", crt)

    sans = ",".join(["IP:127.0.0.1", f"IP:{SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
                     "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                     "DNS:kubernetes.default.svc.cluster.local"])
    leaf("apiserver", "/CN=kube-apiserver",
         f"extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\nsubjectAltName={sans}\n")
    client = "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    # system:masters for admin and kwok: kwok plays every kubelet, so the Node authorizer's
    # one-identity-per-node model does not fit it.
    leaf("admin", "/O=system:masters/CN=npuops-lab-admin", client)
    leaf("kwok", "/O=system:masters/CN=kwok", client)
    leaf("controller-manager", "/CN=system:kube-controller-manager", client)
    leaf("scheduler", "/CN=system:kube-scheduler", client)
    # ServiceAccount token signing key (RSA: accepted by every consumer of SA tokens).
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pki / "sa.key")
    openssl("pkey", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")
    for f in pki.glob("*.key"):
        f.chmod(0o600)


def _b64(path):
    """Base64 of a file's bytes, as kubeconfig's *-data fields want it."""
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path, pki, user):
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "npuops-lab",
           "clusters": [{"name": "npuops-lab", "cluster": {
               "server": f"https://127.0.0.1:{PORTS['kube-apiserver']}",
               "certificate-authority-data": _b64(pki / "ca.crt")}}],
           "users": [{"name": user, "user": {"client-certificate-data": _b64(pki / f"{user}.crt"),
                                             "client-key-data": _b64(pki / f"{user}.key")}}],
           "contexts": [{"name": "npuops-lab", "context": {"cluster": "npuops-lab", "user": user}}]}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)


# ---------------------------------------------------------------- processes
def pidfile(name):
    return STATE / "pids" / f"{name}.json"


def read_pid(name):
    try:
        return json.loads(pidfile(name).read_text())
    except (OSError, ValueError):
        return None


def alive(rec):
    """True only if the recorded pid still runs the recorded binary (guards against pid reuse)."""
    if not rec:
        return False
    try:
        exe = os.readlink(f"/proc/{rec['pid']}/exe")
    except OSError:
        return False
    return exe.removesuffix(" (deleted)") == rec["exe"]


def listening(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(name, exe, args, port=None):
    logf = open(STATE / "logs" / f"{name}.log", "ab")
    # New session: the lab outlives this command and is not hit by the terminal's Ctrl-C.
    p = subprocess.Popen([str(exe), *args], stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                         start_new_session=True, cwd=STATE)
    rec = {"pid": p.pid, "exe": os.path.realpath(exe), "port": port or PORTS[name]}
    pidfile(name).write_text(json.dumps(rec))
    return p


def wait_for(what, check, timeout, proc=None, name=None):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            die(f"{name} exited (rc={proc.returncode}); see {STATE}/logs/{name}.log")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - anything means "not yet"
            pass
        time.sleep(0.5)
    die(f"timed out after {timeout}s waiting for {what}; logs in {STATE}/logs/")


def https_ok(port, path, pki=None):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt")) if pki else ssl._create_unverified_context()
    if pki:
        ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=3) as r:
        return r.status == 200


def http_ok(url):
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.status == 200


# ---------------------------------------------------------------- scenario / nodes
def load_scenario(path=None):
    return yaml.safe_load(Path(path or STATE / "scenario.yaml").read_text())


def node_manifest(n, version):
    name = n["name"]
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "type": "kwok", HEARTBEAT[0]: HEARTBEAT[1]}
    labels.update({k: str(v) for k, v in (n.get("labels") or {}).items()})
    cap = {k: str(v) for k, v in (n.get("capacity") or {"cpu": "32", "memory": "256Gi", "pods": "110"}).items()}
    info = n.get("nodeInfo") or {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {FAKE_ANN[0]: FAKE_ANN[1], "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {},
            # Status is kept on create; kwok's node-initialize stage keeps capacity and nodeInfo
            # that are already set and only fills in conditions/addresses.
            "status": {"capacity": cap, "allocatable": dict(cap), "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": version,
                "kubeProxyVersion": version, "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": info.get("kernelVersion", ""), "osImage": info.get("osImage", ""),
                "machineID": "", "systemUUID": "", "bootID": ""}}}


def kubectl(*args, input=None, check=True):
    exe = read_state_bin("kubectl")
    return subprocess.run([exe, f"--kubeconfig={KUBECONFIG}", *args], input=input, text=True,
                          check=check, capture_output=True)


def read_state_bin(name):
    return json.loads((STATE / "bins.json").read_text())[name]


def nodes_ready(names):
    items = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    ready = {i["metadata"]["name"] for i in items
             if any(c["type"] == "Ready" and c["status"] == "True" for c in i["status"].get("conditions", []))}
    return set(names) <= ready


def apply_nodes(nodes, version):
    docs = [node_manifest(n, version) for n in nodes]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    wait_for(f"nodes {[n['name'] for n in nodes]} Ready", lambda: nodes_ready([n["name"] for n in nodes]), 60)


def hosts_enabled(sc):
    return (os.environ.get("NPUOPS_LAB_HOSTS", "1") != "0" and HOSTCTL.exists()
            and any(n.get("host") for n in sc.get("nodes", [])))


def hostctl(action):
    env = dict(os.environ, KUBECONFIG=str(KUBECONFIG), NPUOPS_LAB_DIR=str(STATE),
               NPUOPS_LAB_SCENARIO=str(STATE / "scenario.yaml"))
    return subprocess.run([str(HOSTCTL), action], env=env, check=False).returncode


# ---------------------------------------------------------------- commands
def is_up():
    return all(alive(read_pid(c)) for c in ORDER) and KUBECONFIG.exists()


def cmd_up():
    export = f"export KUBECONFIG={KUBECONFIG}"
    if is_up():
        print(f"lab is already up ({STATE})")
        print(export)
        return 0
    if STATE.exists() and not (STATE / "pids").is_dir():
        if set(os.listdir(STATE)) <= {"hosts"}:  # only what hostctl leaves behind: stale lab hosts
            log(f"labctl: removing leftover lab-host state in {STATE}")
            if HOSTCTL.exists():
                hostctl("down")
            shutil.rmtree(STATE)
        else:
            die(f"{STATE} exists but is not lab state; remove it or set NPUOPS_LAB_DIR")
    if STATE.exists():
        log(f"labctl: stale or partial lab state in {STATE}; cleaning it up first")
        cmd_down()
    t0 = time.time()
    bins = binaries()
    log(f"binaries ready ({time.time() - t0:.0f}s); starting lab in {STATE}")
    for d in ("pids", "logs", "etcd"):
        (STATE / d).mkdir(parents=True, exist_ok=True)
    (STATE / "etcd").chmod(0o700)
    (STATE / "bins.json").write_text(json.dumps({k: str(v) for k, v in bins.items()}))
    shutil.copy(SCENARIO, STATE / "scenario.yaml")  # add-node uses the scenario the lab was started with
    pki = STATE / "pki"
    make_certs(pki)
    write_kubeconfig(KUBECONFIG, pki, "admin")
    for u in ("controller-manager", "scheduler", "kwok"):
        write_kubeconfig(STATE / f"{u}.kubeconfig", pki, u)

    e = PORTS["etcd"]
    p = start("etcd", bins["etcd"], [
        "--name=lab", f"--data-dir={STATE}/etcd",
        f"--listen-client-urls=http://127.0.0.1:{e}", f"--advertise-client-urls=http://127.0.0.1:{e}",
        f"--listen-peer-urls=http://127.0.0.1:{e + 1}", f"--initial-advertise-peer-urls=http://127.0.0.1:{e + 1}",
        f"--initial-cluster=lab=http://127.0.0.1:{e + 1}",
        "--unsafe-no-fsync",  # throwaway data: skip fsync, much faster on slow disks
        "--log-level=warn"])
    wait_for("etcd /health", lambda: http_ok(f"http://127.0.0.1:{e}/health"), 30, p, "etcd")

    a = PORTS["kube-apiserver"]
    p = start("kube-apiserver", bins["kube-apiserver"], [
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={a}",
        f"--etcd-servers=http://127.0.0.1:{e}",
        f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
        f"--client-ca-file={pki}/ca.crt",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki}/sa.pub", f"--service-account-signing-key-file={pki}/sa.key",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true", "--profiling=false", "--v=1"])
    wait_for("kube-apiserver /readyz", lambda: https_ok(a, "/readyz", pki), 120, p, "kube-apiserver")

    common = ["--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false"]
    kcm = STATE / "controller-manager.kubeconfig"
    p = start("kube-controller-manager", bins["kube-controller-manager"], [
        *common, f"--secure-port={PORTS['kube-controller-manager']}", f"--cert-dir={STATE}/kcm-certs",
        f"--kubeconfig={kcm}", f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
        f"--cluster-signing-cert-file={pki}/ca.crt", f"--cluster-signing-key-file={pki}/ca.key",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--node-monitor-grace-period={GRACE}", f"--node-monitor-period={MONITOR}"])
    sch = STATE / "scheduler.kubeconfig"
    p2 = start("kube-scheduler", bins["kube-scheduler"], [
        *common, f"--secure-port={PORTS['kube-scheduler']}", f"--cert-dir={STATE}/sched-certs",
        f"--kubeconfig={sch}", f"--authentication-kubeconfig={sch}", f"--authorization-kubeconfig={sch}"])
    p3 = start("kwok", bins["kwok"], [
        f"--kubeconfig={STATE}/kwok.kubeconfig", f"--config={bins['stages']}",
        "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={FAKE_ANN[0]}={FAKE_ANN[1]}",
        f"--manage-nodes-with-label-selector={HEARTBEAT[0]}={HEARTBEAT[1]}",
        "--cidr=10.244.0.1/16", "--node-ip=127.0.0.1",
        f"--node-lease-duration-seconds={LEASE_S}", f"--server-address=127.0.0.1:{PORTS['kwok']}"])
    wait_for("kube-controller-manager /healthz",
             lambda: https_ok(PORTS["kube-controller-manager"], "/healthz"), 60, p, "kube-controller-manager")
    wait_for("kube-scheduler /healthz", lambda: https_ok(PORTS["kube-scheduler"], "/healthz"), 60, p2,
             "kube-scheduler")
    wait_for("kwok port", lambda: listening(PORTS["kwok"]), 30, p3, "kwok")

    sc = load_scenario()
    ns = sc.get("namespace", "gpu-drv")
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
    # The ServiceAccount admission plugin rejects pods until the namespace's default SA exists.
    wait_for(f"default ServiceAccount in {ns}",
             lambda: kubectl("-n", ns, "get", "sa", "default", check=False).returncode == 0, 60)
    apply_nodes([n for n in sc["nodes"] if not n.get("join")], bins["version"])
    if hosts_enabled(sc):
        log("starting lab hosts (tests/lab/hosts/hostctl up)")
        if hostctl("up") != 0:
            die("hostctl up failed")
    log(f"lab up in {time.time() - t0:.0f}s: Kubernetes {bins['version']}, state {STATE}")
    print(export)
    return 0


def cmd_down():
    t0 = time.time()
    if not (STATE / "pids").is_dir():  # never delete a directory that labctl did not create
        print(f"lab is not running (no lab state in {STATE})")
        return 0
    if HOSTCTL.exists():  # hosts are found by their state-dir label, so no scenario copy is needed
        if hostctl("down") != 0:
            log("labctl: warning: hostctl down failed; stopping the control plane anyway")
    for name in reversed(ORDER):  # kwok first, etcd last
        rec = read_pid(name)
        if alive(rec):
            stop_pid(name, rec)
    ports = {n: (read_pid(n) or {}).get("port", p) for n, p in PORTS.items()}  # as recorded at up
    busy = [f"{n}:{p}" for n, p in ports.items() if listening(p)]
    shutil.rmtree(STATE)
    if busy:
        die(f"ports still in use after down (not ours?): {busy}")
    print(f"lab is down ({time.time() - t0:.1f}s)")
    return 0


def cmd_status():
    up = True
    print(f"state: {STATE} ({'present' if STATE.exists() else 'absent'})")
    for name in ORDER:
        rec = read_pid(name)
        a, port = alive(rec), (rec or {}).get("port", PORTS[name])
        up &= a
        print(f"{name:24} pid={rec['pid'] if rec else '-':<8} alive={'yes' if a else 'no':<4}"
              f" port=127.0.0.1:{port} listening={'yes' if listening(port) else 'no'}")
    if up:
        print(kubectl("get", "nodes", check=False).stdout, end="")
        print(f"export KUBECONFIG={KUBECONFIG}")
    return 0 if up else 3


def cmd_add_node(name):
    if not is_up():
        die("lab is not up")
    nodes = [n for n in load_scenario()["nodes"] if n["name"] == name]
    if not nodes:
        die(f"node {name} is not in the lab scenario")
    apply_nodes(nodes, read_state_bin("version"))
    print(f"node {name} is Ready")
    return 0


def cmd_remove_node(name):
    kubectl("delete", "node", name, "--ignore-not-found", "--wait=true")
    print(f"node {name} removed")
    return 0


def stop_pid(name, rec, sig=signal.SIGTERM, grace=20.0):
    """Signal the recorded process and wait until it is gone (SIGKILL after ``grace`` seconds)."""
    if not alive(rec):
        return
    try:
        os.kill(rec["pid"], sig)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while alive(rec) and time.time() < deadline:
        time.sleep(0.1)
    if alive(rec):
        log(f"{name} ignored {signal.Signals(sig).name}; sending SIGKILL")
        os.kill(rec["pid"], signal.SIGKILL)
        while alive(rec):
            time.sleep(0.1)


def cmd_restart(name, *opts):
    """Stop one component, keep it down for ``--down N`` seconds (counted from the moment it is gone),
    start it again with exactly the command line it had (read from /proc) and wait until it answers
    (/readyz for kube-apiserver, /healthz for the controllers, the port otherwise). ``--kill`` stops it
    with SIGKILL instead of SIGTERM (no graceful shutdown). One line on stdout with the timings."""
    if name not in ORDER:
        die(f"restart: unknown component {name!r}; one of {', '.join(ORDER)}")
    down, sig = 0.0, signal.SIGTERM
    opts = list(opts)
    while opts:
        opt = opts.pop(0)
        if opt == "--down" and opts:
            down = float(opts.pop(0))
        elif opt.startswith("--down="):
            down = float(opt.split("=", 1)[1])
        elif opt == "--kill":
            sig = signal.SIGKILL
        else:
            die(f"restart: unknown option {opt!r}; usage: labctl restart COMPONENT [--down SECONDS] [--kill]")
    rec = read_pid(name)
    if not alive(rec):
        die(f"{name} is not running (no live pid in {pidfile(name)})")
    # The exact flags it runs with: argv[1:] of the running process (NUL-separated in /proc).
    argv = Path(f"/proc/{rec['pid']}/cmdline").read_bytes().split(b"\0")
    args = [a.decode() for a in argv[1:] if a]
    port = rec.get("port") or PORTS[name]
    t0 = time.time()
    os.kill(rec["pid"], sig)
    # Down from the moment it stops answering: kube-apiserver closes its listener at once but may
    # take its full shutdown timeout to exit while watches drain; SIGKILL after 5 s of that.
    while alive(rec) and listening(port):
        time.sleep(0.05)
    stopped = time.time()
    stop_pid(name, rec, signal.SIGKILL if sig == signal.SIGKILL else signal.SIGTERM, grace=5.0)
    time.sleep(max(0.0, down - (time.time() - stopped)))
    restarted = time.time()
    p = start(name, rec["exe"], args, port=port)
    pki = STATE / "pki"
    if name == "kube-apiserver":
        wait_for(f"{name} /readyz", lambda: https_ok(port, "/readyz", pki), 120, p, name)
    elif name in ("kube-controller-manager", "kube-scheduler"):
        wait_for(f"{name} /healthz", lambda: https_ok(port, "/healthz"), 60, p, name)
    elif name == "etcd":
        wait_for("etcd /health", lambda: http_ok(f"http://127.0.0.1:{port}/health"), 30, p, name)
    else:
        wait_for(f"{name} port", lambda: listening(port), 30, p, name)
    ready = time.time()
    print(f"{name} restarted: stopping took {stopped - t0:.1f}s, down {restarted - stopped:.1f}s, "
          f"ready {ready - restarted:.1f}s after the start (pid {p.pid})")
    return 0


def cmd_env():
    """Shell lines for `eval`: the lab's kubectl (matches the server) first on PATH, KUBECONFIG."""
    if (STATE / "bins.json").exists():
        print(f"export PATH={Path(read_state_bin('kubectl')).parent}:$PATH")
    print(f"export KUBECONFIG={KUBECONFIG}")
    return 0


def main(argv):
    cmds = {"up": cmd_up, "down": cmd_down, "status": cmd_status,
            "env": cmd_env,
            "add-node": cmd_add_node, "remove-node": cmd_remove_node, "restart": cmd_restart}
    if not argv or argv[0] not in cmds:
        die(f"usage: labctl {{{'|'.join(cmds)}}} [NODE | COMPONENT [--down SECONDS] [--kill]]")
    try:
        return cmds[argv[0]](*argv[1:])
    except subprocess.CalledProcessError as e:
        die(f"{' '.join(map(str, e.cmd))} failed (rc={e.returncode}): {e.stderr or ''}")
    except TypeError as e:
        die(f"bad arguments: {e}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
