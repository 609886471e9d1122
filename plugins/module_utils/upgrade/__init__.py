# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""One node's upgrade: the upgrade-state names and their transitions (states), the typed policy,
admission (maxParallelUpgrades / maxUnavailable), cordon, PDB-aware drain and eviction rules,
operands, validation, the per-node record, and NodeUpgrade, which routes a call to its phase
(start and prepare, pod removal, reboot, finish and fail, status: functions of one UpgradeContext,
context.py, and its guarded writes, transitions.py). Imports k8s/, driver/, fleet/ and errors.py;
never host/."""
