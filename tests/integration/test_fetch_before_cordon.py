"""The driver's packages are fetched in the preflight, before any cordon (driver_upgrade_download).

An exact version leaves an archive when a newer point release lands, and a mirror can lose a file its
index still lists: before this, apt found out in the install, after the drain. A scratch host behind
its own kwok Node gets its packages from an HTTP mirror of the lab repository inside the host (python's
http.server, as a site mirror answers: 404 for a file it lacks). The plan lists what the run would
fetch; a mirror that lost one .deb, or that dropped the target version while the host's lists are
stale, refuses the host in the preflight naming the package, the URL and apt's answer, with the node
untouched (no state label, schedulable) and dpkg's view of the host unchanged; a version dropped from
refreshed lists is refused as not in the apt sources; with the file back the window upgrades the host.
"""

from __future__ import annotations

import pytest
from scratchhost import dpkg, host_row, play, reload_window, scratch_host
from test_host_lost import hx

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

OLD, TARGET = "535.183.06", "550.90.07"
KERNEL = "5.15.0-107-generic"
STATE = "nvidia.com/gpu-driver-upgrade-state"
MIRROR = "http://127.0.0.1:8081"
LOST = "nvidia-utils-550-server_550.90.07-0ubuntu1_amd64.deb"

# rewrites the mirror's indexes without the target version (as an archive does when a newer point
# release replaces it): Packages, Packages.gz and the Release hashes that apt checks them against
DROP_VERSION = r"""
import glob, gzip, hashlib, os, re
for suite in glob.glob("/srv/mirror/dists/*/"):
    pk = os.path.join(suite, "main/binary-amd64/Packages")
    text = open(pk).read()
    keep = [s for s in text.strip("\n").split("\n\n") if not re.search(r"^Version: (\d+:)?550\.90\.07-", s, re.M)]
    data = ("\n\n".join(keep) + "\n").encode()
    open(pk, "wb").write(data)
    gzip.open(pk + ".gz", "wb").write(data)
    rel = os.path.join(suite, "Release")
    algos = {"MD5Sum": "md5", "SHA1": "sha1", "SHA256": "sha256", "SHA512": "sha512"}
    out, algo = [], None
    for line in open(rel).read().splitlines():
        if line.rstrip(":") in algos and line.endswith(":"):
            algo = algos[line.rstrip(":")]
        elif algo and line.startswith(" "):
            path = line.split()[-1]
            blob = open(os.path.join(suite, path), "rb").read()
            line = " %s %16d %s" % (hashlib.new(algo, blob).hexdigest(), len(blob), path)
        else:
            algo = None
        out.append(line)
    open(rel, "w").write("\n".join(out) + "\n")
for deb in glob.glob("/srv/mirror/pool/*_550.90.07-*.deb"):
    os.unlink(deb)
"""


@pytest.fixture
def mirrored_host(core_v1):
    with scratch_host(core_v1, "lab-fetch", ["--kernel", KERNEL, "--driver", OLD], "535") as name:
        r = hx(name, "set -e; mkdir -p /srv/mirror; cp -a /srv/npuops-lab-repo/. /srv/mirror/; cd /srv/mirror;"
                     " (setsid python3 -m http.server 8081 --bind 127.0.0.1 >/var/log/mirror.log 2>&1 &);"
                     " for i in $(seq 50); do python3 -c 'import urllib.request as u; u.urlopen(\"%s/dists/\")'"
                     " 2>/dev/null && break; sleep 0.2; done;"
                     " sed -i 's|file:/srv/npuops-lab-repo|%s|' /etc/apt/sources.list.d/npuops-lab.list;"
                     " apt-get update -qq" % (MIRROR, MIRROR))
        assert r.returncode == 0, r.stdout + r.stderr
        yield name


def window(name: str, report_dir, *extra) -> list:
    return reload_window(name, report_dir, TARGET, *extra)


def untouched(core_v1, name, before) -> None:
    node = core_v1.read_node(name)
    assert STATE not in (node.metadata.labels or {}) and not node.spec.unschedulable, node.metadata.labels
    assert dpkg(name) == before
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == OLD


def test_a_deb_the_mirror_lost_refuses_the_host_before_any_cordon(core_v1, mirrored_host, lab_kubeconfig, tmp_path):
    name = mirrored_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = dpkg(name)

    # the plan says what the run would fetch, and fetches nothing
    rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir, "maintenance_mode=plan"))
    assert rc == 0, out[-4000:]
    row = host_row(report_dir, name, "latest-plan")
    fetch = {d["name"]: d for d in row["transaction"]["downloads"]}
    assert fetch["nvidia-utils-550-server"]["uri"] == f"{MIRROR}/pool/{LOST}", fetch
    assert row["transaction"]["download_bytes"] == sum(d["size"] for d in fetch.values()) > 0
    assert "would fetch %d .deb" % len(fetch) in (report_dir / "latest-plan.md").read_text()
    assert hx(name, "ls /var/cache/apt/archives/ | grep -c 550.90.07 || true").stdout.strip() == "0"

    hx(name, f"rm /srv/mirror/pool/{LOST}")
    rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir))
    assert rc != 0, out[-4000:]
    h = host_row(report_dir, name)
    assert h["status"] == "failed" and h["failed_phase"] == "preflight", h
    why = (f"cannot download the target packages from the apt sources of {name} before any cordon: "
           f"nvidia-utils-550-server 550.90.07-0ubuntu1 from {MIRROR}/pool/{LOST}: 404 File not found")
    assert why in h["reason"], h
    untouched(core_v1, name, before)

    # the file back: the window upgrades the host, its packages from apt's cache
    hx(name, f"cp /srv/npuops-lab-repo/pool/{LOST} /srv/mirror/pool/")
    rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir))
    assert rc == 0, out[-5000:]
    h = host_row(report_dir, name)
    assert h["status"] == "upgraded" and h["final_state"] == sm.UPGRADE_DONE, h
    # fetched once, by the preflight (the mirror's log: one GET answered 200); the install took it from apt's cache
    gets = hx(name, f"grep -c 'GET /pool/{LOST} HTTP/1.1\" 200' /var/log/mirror.log").stdout.strip()
    assert gets == "1", hx(name, "cat /var/log/mirror.log").stdout[-3000:]
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET
    node = core_v1.read_node(name)
    assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable


def test_a_version_the_archive_dropped_is_refused_before_any_cordon(core_v1, mirrored_host, lab_kubeconfig, tmp_path):
    name = mirrored_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = dpkg(name)
    rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir, "maintenance_mode=plan"))
    assert rc == 0 and host_row(report_dir, name, "latest-plan")["status"] == "would-upgrade", out[-4000:]

    r = hx(name, "python3 - <<'EOF'\n%s\nEOF" % DROP_VERSION)
    assert r.returncode == 0, r.stderr
    # the host's lists are stale (not refreshed): they still offer the version, the mirror has no file
    rc, out = play(name, lab_kubeconfig, report_dir,
                   *window(name, report_dir, {"driver_upgrade_apt_update_cache": False}))
    assert rc != 0, out[-4000:]
    h = host_row(report_dir, name)
    assert h["status"] == "failed" and h["failed_phase"] == "preflight", h
    assert "before any cordon" in h["reason"] and "404 File not found" in h["reason"], h["reason"]
    untouched(core_v1, name, before)

    # refreshed lists: the version is gone from the apt sources
    rc, out = play(name, lab_kubeconfig, report_dir, *window(name, report_dir))
    assert rc != 0, out[-4000:]
    h = host_row(report_dir, name)
    assert h["failed_phase"] == "preflight" and "is not available in the apt sources of %s" % name in h["reason"], h
    untouched(core_v1, name, before)
