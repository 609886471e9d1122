# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet-level helpers: host-to-Node identity, workload compatibility of a planned change (pure, no I/O)."""
