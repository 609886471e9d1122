#!/usr/bin/env bash
# `make test`: ruff, ansible-lint, ansible-test sanity, unit tests, then the lab (started here and
# always stopped here) with integration tests and molecule scenarios. Usage: test.sh [stage...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$PWD/build/collections"
export NPUOPS_LAB_DIR="${NPUOPS_LAB_DIR:-/tmp/npuops-lab}"
export NPUOPS_TEST_T0="${NPUOPS_TEST_T0:-$(date +%s)}"  # the real-package test's budget counts from here
stages=("$@")
[ "${#stages[@]}" -gt 0 ] || stages=(lint sanity unit integration)

link_collection() {
  mkdir -p build/collections/ansible_collections/npuops
  [ -e build/collections/ansible_collections/npuops/fleet ] || ln -s "$PWD" build/collections/ansible_collections/npuops/fleet
}

stage_lint() {
  echo "== ruff"; ruff check plugins tests scripts
  echo "== ansible-lint (profile production)"; ansible-lint -q --profile production
  echo "== antsibull-changelog lint"; antsibull-changelog lint
  echo "== promtool check rules / test rules (deploy/monitoring)"
  promtool check rules deploy/monitoring/*.rules.yml
  promtool test rules deploy/monitoring/tests/*.test.yml
  stage_docs_lint
  stage_galaxy_import
  stage_mypy  # last: the other checks still run while mypy reports errors
}

stage_mypy() {
  # [tool.mypy] in pyproject.toml: plugins/ through the build/collections symlink (link_collection),
  # so that modules are named ansible_collections.npuops.fleet.* as Ansible imports them
  echo "== mypy (plugins)"; mypy
}

docs_env() {
  # .venv-docs first; community.general and kubernetes.core (galaxy.yml's dependencies) from .venv's
  # `ansible` package, for ansible-doc
  local site
  site=$("$PWD/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  export PATH="$PWD/.venv-docs/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$PWD/build/collections:$site"
}

stage_docs_lint() {
  echo "== antsibull-docs lint-collection-docs --plugin-docs (docs/docsite, every module's, plugin's and role's docs)"
  (docs_env && antsibull-docs lint-collection-docs --plugin-docs .)
  echo "== make docs (the docsite with Sphinx, warnings fail)"
  scripts/docs.sh
}

stage_galaxy_import() {
  # the tarball `make build` makes, through Galaxy's own import checks (scripts/galaxy-importer.cfg:
  # offline, no container engine); any WARNING or ERROR line fails the stage
  echo "== galaxy-importer (the built tarball)"
  local dir=build/galaxy-import log rc=0
  rm -rf "$dir" && mkdir -p "$dir"
  ansible-galaxy collection build --force --output-path "$dir" . >/dev/null
  log="$dir/importer.log"
  # its ansible-doc and ansible-lint are .venv's, whose `ansible` package brings the dependencies
  (cd "$dir" && GALAXY_IMPORTER_CONFIG="$PWD/../../scripts/galaxy-importer.cfg" \
    ../../.venv-docs/bin/python -m galaxy_importer.main ./*.tar.gz >importer.log 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || grep -qE '^(WARNING|ERROR|CRITICAL)' "$log" \
     || ! grep -q '^Importer processing completed successfully' "$log"; then
    cat "$log"; echo "galaxy-importer: not clean (rc $rc; log $log)" >&2; return 1
  fi
  echo "galaxy-importer: no warnings ($(grep -c '^Loading ' "$log") contents loaded)"
}

stage_sanity() {
  # ansible-test wants the collection at .../ansible_collections/npuops/fleet and, inside a git work
  # tree, only sees tracked files: copy the tracked + new files outside the repo.
  echo "== ansible-test sanity"
  local dst="${TMPDIR:-/tmp}/npuops-sanity.$$/ansible_collections/npuops/fleet"
  mkdir -p "$dst"
  git ls-files -co --exclude-standard | grep -v '^tests/lab/' | while read -r f; do [ -e "$f" ] && echo "$f"; done \
    | tar -cf - -T - | tar -xf - -C "$dst"
  local rc=0
  (cd "$dst" && "$OLDPWD/.venv-sanity/bin/ansible-test" sanity --requirements --python 3.12 --color no 2>&1 \
    | grep -v '^Collecting\|^  Downloading\|^Installing\|^Successfully\|^Using cached\|━') || rc=$?  # copy removed below
  rm -rf "${dst%/ansible_collections/npuops/fleet}"
  return "$rc"
}

stage_unit() {
  echo "== pytest unit + packaging (galaxy build, ansible-doc of every module and role)"
  pytest -q -p no:cacheprovider tests/unit tests/packaging
}

ensure_lab() {
  # The lab is started here and always stopped here (trap below), unless it was already up.
  if ! tests/lab/labctl status >/dev/null 2>&1; then  # exit 0 only when every component runs
    echo "== lab up"
    LAB_STARTED_HERE=1
    tests/lab/labctl up | tail -n 3
  fi
  eval "$(tests/lab/labctl env)"
}

stage_integration() {
  # NPUOPS_IT_ROTATION=N: one slot of N of the lab tests, the one run least recently on this machine
  # (tests/integration/rotation.py; `make test` sets 2 to stay inside CI's budget, `make integration`
  # runs all); pytest prints the rotation and its tests, tests/integration/last-rotations.md the record
  ensure_lab
  echo "== pytest integration (lab, rotation ${NPUOPS_IT_ROTATION:-1})"
  NPUOPS_REQUIRE_LAB=1 pytest -q -p no:cacheprovider tests/integration
  stage_faults
  stage_molecule
}

stage_realpkg() {
  # Debian's real NVIDIA packages and the real dkms through the maintenance window
  # (tests/integration/test_realpkg.py: in-branch, Tesla branch change, a failed build): a real DKMS
  # build per test (~17 min for the three), 3-11 more minutes cold for each of the two images
  # (tests/lab/realpkg, cached by input hash); `make test` runs one of them whose image is cached.
  ensure_lab
  echo "== pytest real packages (lab)"
  NPUOPS_REQUIRE_LAB=1 NPUOPS_REALPKG=1 pytest -q -p no:cacheprovider tests/integration/test_realpkg.py
}

stage_faults() {
  # Fault injection on the lab (tests/faults/run.py): FAULTS_CASES cases (default 2; `all` = the full
  # sweep, `make faults`), the ones run least recently on this machine (the record of rotation.py;
  # FAULTS_SEED=N takes slice N instead), so consecutive CI runs exercise every case.
  # Table: tests/faults/last-result.md.
  ensure_lab
  echo "== faults (${FAULTS_CASES:-2} case(s)${FAULTS_SEED:+, seed $FAULTS_SEED})"
  python tests/faults/run.py --cases "${FAULTS_CASES:-2}"
}

stage_molecule() {
  echo "== molecule (extensions/molecule, on scratch lab hosts)"
  [ -n "${KUBECONFIG:-}" ] || { echo "molecule needs the lab: run make lab-up first" >&2; return 1; }
  tests/lab/hosts/hostctl build >/dev/null  # once, so parallel spawns never race on a stale image
  molecule test --all
}

cleanup() {
  if [ -n "${LAB_STARTED_HERE:-}" ]; then echo "== lab down"; tests/lab/labctl down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

link_collection
for s in "${stages[@]}"; do "stage_$s"; done
