# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja test ``npuops.fleet.package_match``: a package name matches any of shell-style patterns.

The rule of every package family list of the collection (vendor profiles' ``package_families``,
``driver_upgrade_hold_exclude``, ``package_holds_exclude``) is ``apt_state.in_families``: fnmatch
globs, case-sensitive, over the whole name, an architecture qualifier (``:amd64``) ignored.
"""

from __future__ import annotations

from typing import Iterable, Union

from ansible_collections.npuops.fleet.plugins.module_utils.host.apt_state import in_families


def package_match(name: str, patterns: Union[str, Iterable[str]]) -> bool:
    if not isinstance(name, str):
        raise TypeError("package_match: the package name must be a string, got %r" % (name,))
    if isinstance(patterns, str):
        patterns = [patterns]
    return in_families(name, [str(p) for p in patterns or []])


class TestModule:
    def tests(self):
        return {"package_match": package_match}
