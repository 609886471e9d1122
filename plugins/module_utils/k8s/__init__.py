# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The Kubernetes API layer: the client and its auth options, the Kubernetes module frame, the one
retry of transient errors, the one waiter (watch, else bounded poll), paginated LISTs, the node
snapshot, Lease I/O, and object accessors. Nothing here knows about drivers or upgrades: it imports
only from k8s/ and errors.py (never upgrade/, window/, driver/, host/, fleet/)."""
