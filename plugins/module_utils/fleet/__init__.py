# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet-level helpers: what ties an inventory host to its Kubernetes Node (pure, no I/O)."""
