#!/usr/bin/env python3
"""Local apt repository of the real Debian packages pinned in pins.txt, with their dependency closure.

  mirror.py            build (or reuse) the mirror; prints its path, size and build time
  mirror.py --path     print the mirror's path only (builds it if missing)

The closure is resolved by apt itself (`apt-get install --download-only`) against an EMPTY dpkg
status, with a private apt configuration (sources, lists, cache and preferences under a temporary
folder; this machine's /etc/apt is not touched), once per set on top of `base`: `base` +
`before`, `base` + `after`, `base` + `tesla470` ... A `src` line of pins.txt becomes a preference
(priority 1001) for that source's version, so virtual and unversioned dependencies stay in the set's
version. The union of the
downloaded .debs is a flat repository (pool/ + Packages + Release, by apt-ftparchive):

  deb [trusted=yes] file:/srv/npuops-realpkg-mirror ./

Cache: $NPUOPS_LAB_CACHE/realpkg/mirror-<sha256(pins.txt + this script)[:16]>/ (NPUOPS_LAB_CACHE
defaults to ~/.cache/npuops-lab); a second run with the same inputs does nothing. Needs the
Debian archive (deb.debian.org) only on a cold build.
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PINS = os.path.join(HERE, "pins.txt")
CACHE = os.path.join(os.environ.get("NPUOPS_LAB_CACHE", os.path.expanduser("~/.cache/npuops-lab")), "realpkg")
ARCHIVE = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def log(msg: str) -> None:
    """Progress line on stderr."""
    sys.stderr.write("[realpkg %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


class Pins:
    """pins.txt: suites to resolve from, packages per set, source-version pins per set."""

    def __init__(self, path: str = PINS) -> None:
        self.suites: List[Tuple[str, List[str]]] = []
        self.pkgs: Dict[str, List[Tuple[str, str]]] = {}
        self.srcs: Dict[str, List[Tuple[str, str]]] = {}
        with open(path) as f:
            for n, line in enumerate(f, 1):
                words = line.split("#", 1)[0].split()
                if not words:
                    continue
                if words[0] == "suite" and len(words) == 3:
                    self.suites.append((words[1], words[2].split(",")))
                elif words[0] in ("pkg", "src") and len(words) == 4:
                    target = self.pkgs if words[0] == "pkg" else self.srcs
                    target.setdefault(words[1], []).append((words[2], words[3]))
                else:
                    raise SystemExit("%s:%d: cannot parse %r" % (path, n, line.rstrip()))

    def sets(self) -> List[str]:
        """The sets resolved on top of base, in pins.txt order."""
        return [s for s in self.pkgs if s != "base"]

    def install_args(self, dset: str) -> List[str]:
        """`name=version` arguments for apt-get install of base + dset."""
        return ["%s=%s" % nv for nv in self.pkgs.get("base", []) + self.pkgs.get(dset, [])]

    def preferences(self, dset: str) -> str:
        """apt_preferences(5) text pinning dset's sources to their versions."""
        return "".join("Package: src:%s\nPin: version %s\nPin-Priority: 1001\n\n" % sv
                       for sv in self.srcs.get(dset, []))


def mirror_key() -> str:
    """Input hash of the mirror: pins.txt and this script."""
    h = hashlib.sha256()
    for p in (PINS, os.path.abspath(__file__)):
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def mirror_dir() -> str:
    """The cache folder of the mirror for the current inputs."""
    return os.path.join(CACHE, "mirror-" + mirror_key())


def du(path: str) -> int:
    """Bytes in the files under path."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def run(cmd: List[str], env: Dict[str, str], capture: bool = False) -> str:
    """Run cmd; raise with its output's tail if it fails."""
    r = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if r.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout[-4000:]))
    return r.stdout if capture else ""


def apt_env(tmp: str, pins: Pins) -> Dict[str, str]:
    """A private apt configuration under tmp (empty dpkg status, own lists/cache/preferences)."""
    for d in ("lists/partial", "cache/archives/partial", "dpkg/updates", "etc"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    open(os.path.join(tmp, "dpkg", "status"), "w").close()
    with open(os.path.join(tmp, "etc", "sources.list"), "w") as f:
        for suite, comps in pins.suites:
            f.write("deb [arch=amd64 signed-by=%s] %s %s %s\n" % (KEYRING, ARCHIVE, suite, " ".join(comps)))
    conf = os.path.join(tmp, "etc", "apt.conf")
    with open(conf, "w") as f:
        f.write('Dir::Etc::sourcelist "%(t)s/etc/sources.list";\n'
                'Dir::Etc::sourceparts "/nonexistent";\n'
                'Dir::Etc::preferences "%(t)s/etc/preferences";\n'
                'Dir::Etc::preferencesparts "/nonexistent";\n'
                'Dir::State::Lists "%(t)s/lists";\n'
                'Dir::State::status "%(t)s/dpkg/status";\n'
                'Dir::Cache "%(t)s/cache";\n'
                'APT::Architectures { "amd64"; };\n'
                'APT::Install-Recommends "false";\n'
                'APT::Install-Suggests "false";\n'
                'Acquire::Languages "none";\n' % {"t": tmp})
    env = dict(os.environ, APT_CONFIG=conf, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
    return env


def resolve(tmp: str, env: Dict[str, str], pins: Pins, dset: str) -> List[Dict[str, str]]:
    """Download base + dset with its closure; return the closure [{name, version}] in install order."""
    with open(os.path.join(tmp, "etc", "preferences"), "w") as f:
        f.write(pins.preferences(dset))
    args = pins.install_args(dset)
    sim = run(["apt-get", "install", "-s", "-y"] + args, env, capture=True)
    closure = []
    for line in sim.splitlines():
        if line.startswith("Inst "):  # Inst NAME (VERSION SUITE [ARCH])
            w = line.split()
            closure.append({"name": w[1], "version": w[2].lstrip("(")})
    got = {c["name"]: c["version"] for c in closure}
    for nv in args:
        name, ver = nv.split("=", 1)
        if got.get(name) != ver:
            raise RuntimeError("%s: apt chose %s for %s" % (dset, got.get(name), nv))
    run(["apt-get", "install", "-d", "-y", "-q"] + args, env)
    return closure


def build() -> str:
    """Build the mirror unless cached; return its path."""
    out = mirror_dir()
    if os.path.isfile(os.path.join(out, "mirror.json")):
        return out
    pins = Pins()
    t0 = time.time()
    os.makedirs(CACHE, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="mirror-", dir=CACHE)
    try:
        env = apt_env(os.path.join(tmp, "apt"), pins)
        log("apt-get update (private lists: %s)" % ", ".join(s for s, _ in pins.suites))
        run(["apt-get", "update", "-q"], env)
        sets = {}
        for dset in pins.sets():
            log("resolving + downloading base + %s" % dset)
            sets[dset] = resolve(os.path.join(tmp, "apt"), env, pins, dset)
        pool = os.path.join(tmp, "repo", "pool")
        os.makedirs(pool)
        arch = os.path.join(tmp, "apt", "cache", "archives")
        for fn in sorted(os.listdir(arch)):
            if fn.endswith(".deb"):
                os.rename(os.path.join(arch, fn), os.path.join(pool, fn))
        repo = os.path.join(tmp, "repo")
        pk = subprocess.run(["apt-ftparchive", "packages", "pool"], cwd=repo, text=True,
                            stdout=subprocess.PIPE, check=True).stdout
        with open(os.path.join(repo, "Packages"), "w") as f:
            f.write(pk)
        with gzip.open(os.path.join(repo, "Packages.gz"), "wt") as f:
            f.write(pk)
        rel = subprocess.run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=npuops-realpkg",
                              "-o", "APT::FTPArchive::Release::Label=npuops-realpkg", "release", "."],
                             cwd=repo, text=True, stdout=subprocess.PIPE, check=True).stdout
        with open(os.path.join(repo, "Release"), "w") as f:
            f.write(rel)
        debs = len(os.listdir(pool))
        info = {"key": mirror_key(), "built": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.time() - t0),
                "debs": debs, "bytes": du(pool), "sets": sets}
        with open(os.path.join(repo, "mirror.json"), "w") as f:
            json.dump(info, f, indent=1)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(repo, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log("mirror built in %.0fs: %d .debs, %.0f MiB -> %s" % (time.time() - t0, debs, info["bytes"] / 2**20, out))
    return out


def main() -> int:
    """CLI: build or reuse the mirror and report it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", action="store_true", help="print the mirror's path only")
    a = ap.parse_args()
    t0 = time.time()
    out = build()
    if a.path:
        print(out)
        return 0
    with open(os.path.join(out, "mirror.json")) as f:
        info = json.load(f)
    print("mirror %s: %d .debs, %.0f MiB (cold build %ss on %s); this run %.1fs" % (
        out, info["debs"], info["bytes"] / 2**20, info["seconds"], info["built"], time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
