# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Which packages to hold or release, from dpkg's own listings (pure; no I/O).

Private to this collection. Used by the module ``npu_package_holds`` (the package_holds role and the
driver_upgrade role's install step). Names are dpkg package names with any ``:arch`` qualifier
dropped, as ``dpkg --get-selections`` and ``dpkg-query -W`` print them through ``apt_state``'s
parsers; every pattern is an fnmatch glob by ``apt_state.in_families`` (the collection's one rule).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ansible_collections.npuops.fleet.plugins.module_utils.host import apt_state, kmod_versions


def hold_candidates(
    installed: Mapping[str, object],
    running_kernel: str,
    families: Iterable[str] = (),
    names: Iterable[str] = (),
    patterns: Iterable[str] = (),
    kernel: bool = False,
    kernel_meta: bool = False,
    exclude: Iterable[str] = (),
) -> list[str]:
    """The installed packages to hold, sorted: the vendor's driver ``families`` (fnmatch), the booted
    kernel's packages when ``kernel``, the kernel meta packages when ``kernel_meta``, exact ``names``
    and fnmatch ``patterns`` - installed ones only - less those matching ``exclude``.

    ``installed`` is ``apt_state.parse_dpkg_query``'s result (its keys are what counts).
    """
    have = set(installed)
    picked = set(apt_state.match_families(have, list(families)))
    picked |= set(apt_state.match_families(have, list(patterns)))
    picked |= {n.split(":", 1)[0] for n in names} & have
    if kernel and running_kernel:
        picked |= set(kmod_versions.kernel_package_names(running_kernel)) & have
    if kernel_meta:
        picked |= set(apt_state.match_families(have, kmod_versions.KERNEL_META_PATTERNS))
    excl = list(exclude)
    return sorted(n for n in picked if not apt_state.in_families(n, excl))


def release_set(
    held: Iterable[str], names: Iterable[str] = (), patterns: Iterable[str] = (), exclude: Iterable[str] = ()
) -> list[str]:
    """The held packages to release, sorted: those named exactly in ``names`` or matching ``patterns``,
    less those matching ``exclude``. A package that is not held is never touched."""
    wanted = {n.split(":", 1)[0] for n in names}
    pats = list(patterns)
    excl = list(exclude)
    return sorted(
        n for n in set(held) if (n in wanted or apt_state.in_families(n, pats)) and not apt_state.in_families(n, excl)
    )


def parse_selections(text: str) -> dict[str, dict[str, str]]:
    """``dpkg --get-selections`` -> {package: {qualified name: selection}}: a Multi-Arch: same package
    installed for two architectures (``libnvidia-gl-550:amd64``, ``...:i386``) is one package with two
    lines, each of which dpkg holds on its own."""
    res: dict[str, dict[str, str]] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            res.setdefault(parts[0].split(":", 1)[0], {})[parts[0]] = parts[1]
    return res


def held(selections: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Packages with any instance on hold, sorted (apt will not move a held instance)."""
    return sorted(n for n, inst in selections.items() if "hold" in inst.values())


# The instance selections each change acts on: a hold takes the selected ones (a removed instance left
# with its config files, ``deinstall``, stays as it is), a release the held ones.
_ACTS_ON = {"hold": ("install",), "install": ("hold",)}


def not_as_asked(selections: Mapping[str, Mapping[str, str]], packages: Iterable[str], selection: str) -> list[str]:
    """The packages an instance of which the change to ``selection`` would still act on (``hold``: one
    selected ``install``; ``install``: one still held), sorted; a package dpkg does not list is left out."""
    return sorted(p for p in set(packages) if set((selections.get(p) or {}).values()) & set(_ACTS_ON[selection]))


def selections_input(selections: Mapping[str, Mapping[str, str]], packages: Iterable[str], selection: str) -> str:
    """stdin of ``dpkg --set-selections`` setting ``selection`` (``hold`` / ``install``) on every instance
    of each package, by the qualified name dpkg lists (a bare name of a package installed for two
    architectures is ambiguous, and dpkg then rejects the whole input); a package dpkg does not list
    goes by its own name (dpkg only warns)."""
    if selection not in ("hold", "install"):
        raise ValueError("selection must be hold or install, got %r" % (selection,))
    lines: list[str] = []
    for p in sorted(set(packages)):
        inst = selections.get(p)
        names = sorted(q for q, v in inst.items() if v in _ACTS_ON[selection]) if inst else [p]
        lines.extend("%s %s\n" % (q, selection) for q in names)
    return "".join(lines)
