# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The maintenance window's run-wide lock: the window Lease's keepalive, renewed beside the upgrade
so a lost lock stops the node at a safe point (k8s/lease.py's LeaseLostError, which the upgrade treats
as its conflict). Imports only k8s/ and errors.py; the keepalive is passed to the upgrade, which
imports nothing from here."""
