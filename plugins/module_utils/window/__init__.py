# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The maintenance window: one run-wide Lease shared by the processes of a run (``shared.py``: its
record, join rules, failure budget and participants, pure; ``run_lease.py``: the window over the Lease
and the keepalive, renewed beside the upgrade so a lost lock stops the node at a safe point -
k8s/lease.py's LeaseLostError, which the upgrade treats as its conflict). Imports only k8s/ and
errors.py; the keepalive (and its window) is passed to the upgrade, which imports nothing from here."""
