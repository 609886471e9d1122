# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The collection's shared code, one folder per layer; each folder's __init__ says what it may import:

* upgrade/ and window/ - the per-node upgrade (state machine, admission, cordon, drain and eviction)
  and the run-wide lock; modules call these.
* fleet/ - which host is which Node, who called us, what a change does to the fleet's workloads.
* host/ - what runs on the accelerator host: apt/dpkg, DKMS, kmod, smi parsers, driver facts.
* k8s/ - the Kubernetes API: client, module frame, retry, waits, paged lists, Leases, label selectors.
* driver/ - pure driver knowledge: versions, verdicts, node labels, precompiled tags, the matrix.
* errors.py - the one exception base every layer raises from.

tests/unit/plugins/module_utils/test_import_layers.py enforces the direction from the import graph.
"""
