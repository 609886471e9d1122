#!/usr/bin/env bash
# `make docs`: the collection's docsite - the guides of docs/docsite/rst/ (docs/docsite/extra-docs.yml)
# and a page per module, plugin and role - rendered to HTML in build/docsite/build/html by
# antsibull-docs and Sphinx (pinned in docs/requirements-docs.txt, .venv-docs), warnings as errors.
# Offline: the references into Ansible's own docs resolve from a small local inventory, not the network.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv-docs/bin:$PATH"
# community.general and kubernetes.core (dependencies in galaxy.yml) come from .venv's `ansible` package
site=$("$PWD/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export ANSIBLE_COLLECTIONS_PATH="$PWD/build/collections:$site"
out=build/docsite
rm -rf "$out"
mkdir -p "$out"
chmod 755 "$out"  # antsibull-docs wants a directory only its owner can write
antsibull-docs sphinx-init --use-current --fail-on-error --dest-dir "$out" \
  --project npuops.fleet --title "npuops.fleet documentation" --html-short-title npuops.fleet npuops.fleet >/dev/null
.venv-docs/bin/python - "$out/ansible_devel.inv" <<'PY'
# the labels of Ansible's docsite that the generated plugin pages refer to, as a Sphinx inventory
import sys, zlib
labels = {
    "action_plugins": ("plugins/action.html#action-plugins", "Action plugins"),
    "ansible_configuration_settings": ("reference_appendices/config.html#ansible-configuration-settings",
                                       "Ansible Configuration Settings"),
    "callback_plugins": ("plugins/callback.html#callback-plugins", "Callback plugins"),
    "common_return_values": ("reference_appendices/common_return_values.html#common-return-values",
                             "Return Values"),
}
body = "".join(f"{k} std:label -1 {u} {t}\n" for k, (u, t) in sorted(labels.items()))
head = "# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n" \
       "# The remainder of this file is compressed using zlib.\n"
open(sys.argv[1], "wb").write(head.encode() + zlib.compress(body.encode()))
PY
cat >>"$out/conf.py" <<'PY'

# npuops.fleet (scripts/docs.sh): no network - Ansible's labels from the local inventory only
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', '../ansible_devel.inv'),
}
PY
bash "$out/build.sh" >"$out/build.log" 2>&1 || { cat "$out/build.log" >&2; echo "docs: build failed (log: $out/build.log)" >&2; exit 1; }
grep -q "build succeeded" "$out/build.log" || { cat "$out/build.log" >&2; exit 1; }
echo "docs: $out/build/html/index.html"
