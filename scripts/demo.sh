#!/usr/bin/env bash
# make demo: bring the lab up (if it is not up) and run the maintenance window on it:
# lab-node-1 535.183.06 -> 550.90.07 and lab-npu-0 2.4.0 -> 3.0.0 (lab-node-0/2 are already at
# 550.90.07 and finish without disruption), then print the summary (also in ./reports/).
# Environment: NPUOPS_LAB_DIR (lab state, default /tmp/npuops-lab), DEMO_HOSTS (host pattern, default all),
# DEMO_INVENTORY (default inventories/lab), DEMO_ARGS (more ansible-playbook arguments), NPUOPS_REPORT_DIR (default ./reports).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="${ANSIBLE_COLLECTIONS_PATH:-$ROOT/build/collections}"
export NPUOPS_LAB_DIR="${NPUOPS_LAB_DIR:-/tmp/npuops-lab}"
export ANSIBLE_FORCE_COLOR="${ANSIBLE_FORCE_COLOR:-0}"
# the window progress view (plugins/callback/window.py); ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default for task lines
export ANSIBLE_STDOUT_CALLBACK="${ANSIBLE_STDOUT_CALLBACK:-npuops.fleet.window}"
REPORTS="${NPUOPS_REPORT_DIR:-$ROOT/reports}"

# the collection path symlink (make unit / tests/conftest.py create it too)
if [ ! -e "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/npuops/fleet" ]; then
    mkdir -p "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/npuops"
    ln -sfn "$ROOT" "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/npuops/fleet"
fi

t0=$(date +%s)
if ! tests/lab/labctl status >/dev/null 2>&1 || [ ! -s "$NPUOPS_LAB_DIR/kubeconfig" ]; then
    echo "== bringing the lab up (tests/lab/labctl up; the first run builds Kubernetes and the host image)"
    tests/lab/labctl up | tail -n 1
fi
export KUBECONFIG="$NPUOPS_LAB_DIR/kubeconfig"
t1=$(date +%s)
echo "== lab ready in $((t1 - t0)) s; running the maintenance window"
rc=0
extra=()
[ -z "${DEMO_HOSTS:-}" ] || extra+=(-e "maintenance_hosts=$DEMO_HOSTS")
if [ -n "${DEMO_ARGS:-}" ]; then read -ra more <<<"$DEMO_ARGS"; extra+=("${more[@]}"); fi
ansible-playbook playbooks/maintenance_window.yml -i "${DEMO_INVENTORY:-inventories/lab}" \
    -e "maintenance_report_dir=$REPORTS" "${extra[@]}" || rc=$?
t2=$(date +%s)
echo
echo "== summary ($REPORTS/latest.md; maintenance window took $((t2 - t1)) s)"
cat "$REPORTS/latest.md" 2>/dev/null || echo "(no summary written)"
echo
echo "== nodes"
eval "$(tests/lab/labctl env)"  # puts the lab's kubectl (same release as the server) first on PATH
kubectl get nodes \
    -L nvidia.com/gpu-driver-upgrade-state,rebellions.ai/npu-driver-upgrade-state,nvidia.com/cuda.driver.major,rebellions.ai/driver-version.full \
    2>/dev/null || true
exit $rc
