# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Fleet-level helpers: host-to-Node identity, the calling process, and the workload compatibility of a
planned change (pure, no I/O). Imports driver/, k8s/ and errors.py."""
