"""Build the npuops.fleet execution environment image here, without a registry.

Usage: python3 ee/build.py  -> prints the image reference (localhost/npuops-fleet-ee:<hash>) on stdout.

1. The collection's tarball (``ansible-galaxy collection build``, galaxy.yml's build_ignore).
2. A Debian trixie base (python3 3.13, venv, openssh-client, CA certificates, dumb-init) by
   debootstrap, imported as ``localhost/npuops-ee-base:<hash of its dpkg package list>`` (rootfs
   cached under ~/.cache/npuops-lab).
3. ``podman build`` of ee/Containerfile on it: ee/requirements.txt with every dependency pinned by
   ee/constraints.txt in /opt/ee, the collection under /usr/share/ansible/collections, user runner
   (uid 1000, group 0) and an entrypoint that gives an arbitrary uid a passwd entry.

The image is tagged by the hash of everything it is made of (the tarball's files, ee/'s files, the
base), so an unchanged tree reuses the image. pip inside the build trusts the host's CA bundle
(mounted read-only), as pip on the host does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("NPUOPS_LAB_CACHE", os.path.expanduser("~/.cache/npuops-lab")))
MIRROR = "http://deb.debian.org/debian"
SUITE = "trixie"
BASE_PACKAGES = ["python3", "python3-venv", "openssh-client", "ca-certificates", "dumb-init"]
IMAGE = "localhost/npuops-fleet-ee"
BASE_IMAGE = "localhost/npuops-ee-base"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
FILES = ("Containerfile", "requirements.txt", "constraints.txt", "entrypoint.sh")
os.environ.setdefault("CONTAINERS_CONF", str(REPO / "tests" / "lab" / "hosts" / "containers.conf"))


def log(msg: str) -> None:
    print("[ee %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, text=True, capture_output=True, check=False, **kw)
    if r.returncode != 0:
        tail = r.stdout[-3000:] + r.stderr[-3000:]
        raise SystemExit("ee/build.py: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, tail))
    return r


def collection_tarball(out: Path) -> tuple[Path, str]:
    """Build the tarball; its hash covers member names, modes and contents (not the build's mtimes)."""
    galaxy = shutil.which("ansible-galaxy", path=str(REPO / ".venv" / "bin")) or "ansible-galaxy"
    run([galaxy, "collection", "build", "--force", "--output-path", str(out), str(REPO)])
    (tar,) = out.glob("npuops-fleet-*.tar.gz")
    h = hashlib.sha256()
    with tarfile.open(tar) as t:
        for m in sorted(t.getmembers(), key=lambda m: m.name):
            h.update(("%s %o %s\n" % (m.name, m.mode, m.type.decode())).encode())
            if m.isfile() and m.name not in ("MANIFEST.json",):
                h.update(t.extractfile(m).read())
    return tar, h.hexdigest()


def image_exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0


def base_image() -> str:
    """The trixie base: rootfs cached per spec, image tagged by the rootfs's own package list (a rootfs
    debootstrapped later, with newer packages, is another image)."""
    key = hashlib.sha256((" ".join([SUITE, MIRROR] + BASE_PACKAGES)).encode()).hexdigest()[:16]
    rootfs = CACHE / ("ee-rootfs-" + key)
    if not (rootfs / ".complete").exists():
        log("debootstrap %s -> %s (cold build, ~1-2 min)" % (SUITE, rootfs))
        tmp = Path(str(rootfs) + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES), SUITE, str(tmp), MIRROR])
        for p in (tmp / "var/cache/apt/archives").glob("*.deb"):
            p.unlink()
        for p in (tmp / "var/lib/apt/lists").glob("*_*"):
            p.unlink()
        listing = run(["dpkg-query", "--admindir", str(tmp / "var/lib/dpkg"), "-W", "-f",
                       "${Package}=${Version}\n"]).stdout
        (tmp / ".dpkg-list").write_text(listing)
        (tmp / ".complete").touch()
        shutil.rmtree(rootfs, ignore_errors=True)
        tmp.rename(rootfs)
    ref = "%s:%s" % (BASE_IMAGE, hashlib.sha256((rootfs / ".dpkg-list").read_bytes()).hexdigest()[:16])
    if image_exists(ref):
        return ref
    log("importing %s" % ref)
    tar = subprocess.Popen(["tar", "--numeric-owner", "--exclude=./.complete", "--exclude=./.dpkg-list", "-C",
                            str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(["podman", "import", "-", ref], stdin=tar.stdout, capture_output=True, text=True,
                         check=False)
    tar.stdout.close()
    tar.wait()
    if imp.returncode != 0 or tar.returncode != 0:
        raise SystemExit("ee/build.py: podman import of the base failed: %s" % imp.stderr[-2000:])
    return ref


def build() -> str:
    with tempfile.TemporaryDirectory(prefix="npuops-ee-") as d:
        ctx = Path(d)
        tar, tar_hash = collection_tarball(ctx / "dist")
        base = base_image()
        h = hashlib.sha256(tar_hash.encode() + base.encode())
        for f in FILES:
            h.update((HERE / f).read_bytes())
        ref = "%s:%s" % (IMAGE, h.hexdigest()[:16])
        if image_exists(ref):
            log("reusing %s" % ref)
            return ref
        for f in FILES:
            shutil.copy(HERE / f, ctx / f)
        shutil.copy(tar, ctx / "npuops-fleet.tar.gz")
        t0 = time.time()
        log("building %s on %s" % (ref, base))
        cmd = ["podman", "build", "--network", "host", "--build-arg", "EE_BASE=" + base, "-t", ref, "-f",
               str(ctx / "Containerfile")]
        if HOST_CA.is_file():
            cmd += ["--volume", "%s:%s:ro" % (HOST_CA, HOST_CA)]
        run(cmd + [str(ctx)])
        run(["podman", "tag", ref, IMAGE + ":latest"])
        log("built %s in %.0f s" % (ref, time.time() - t0))
        return ref


if __name__ == "__main__":
    print(build())
