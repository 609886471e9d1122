#!/usr/bin/env bash
# Installs everything `make test` / `make demo` need on a fresh Debian machine (idempotent, quiet when done).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(podman runc debootstrap apt-utils dpkg-dev gcc libc6-dev uidmap slirp4netns fuse-overlayfs psmisc openssl util-linux shellcheck
  librsvg2-bin)  # rsvg-convert: a lab test renders the window's timeline.svg to PNG
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=""
for cand in "${NPUOPS_PYTHON:-}" "$HOME"/.pyenv/versions/3.12*/bin/python3 "$HOME"/.pyenv/versions/3.13*/bin/python3 \
  "$(command -v python3.13 || true)" "$(command -v python3.12 || true)" "$(command -v python3 || true)"; do
  if [ -z "$cand" ] || [ ! -x "$cand" ]; then continue; fi
  if "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then PY=$cand; break; fi
done
[ -n "$PY" ] || { echo "bootstrap: need Python >= 3.12 for ansible-core (pyenv or python3.12)" >&2; exit 1; }

stamp=.venv/.requirements.sha
want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: creating .venv with $PY"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q -U pip
  .venv/bin/pip install -q -r requirements-dev.txt
  echo "$want" > "$stamp"
fi

# ansible-test sanity gets its own venv: its pinned requirements must not disturb ansible-lint's.
core=$(.venv/bin/python -c 'import ansible; print(ansible.__version__)')
if [ "$(.venv-sanity/bin/python -c 'import ansible; print(ansible.__version__)' 2>/dev/null)" != "$core" ]; then
  echo "bootstrap: creating .venv-sanity (ansible-core $core)"
  [ -x .venv-sanity/bin/python ] || "$PY" -m venv .venv-sanity
  .venv-sanity/bin/pip install -q -U pip
  .venv-sanity/bin/pip install -q "ansible-core==$core"
fi
# antsibull-docs + Sphinx (`make docs`, the docsite lint) and galaxy-importer (`make lint`) get their own
# venv too: galaxy-importer pins its own ansible-lint and flake8, which must not move .venv's.
stamp=.venv-docs/.requirements.sha
want=$(sha256sum requirements-docs.txt | cut -d' ' -f1)
if [ ! -x .venv-docs/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: creating .venv-docs (antsibull-docs, Sphinx, galaxy-importer)"
  [ -x .venv-docs/bin/python ] || "$PY" -m venv .venv-docs
  .venv-docs/bin/pip install -q -U pip
  .venv-docs/bin/pip install -q -r requirements-docs.txt
  echo "$want" > "$stamp"
fi

# ansible-test fetches get-pip.py from a host that is unreachable here; serve our ensurepip stand-in.
pipver=$(grep -oP "pip='\\K[0-9.]+" .venv-sanity/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | head -1)
mkdir -p "$HOME/.ansible/test/cache"
cp scripts/get_pip_offline.py "$HOME/.ansible/test/cache/get_pip_${pipver//./_}.py"

# This checkout as the collection npuops.fleet (a collection installed under ~/.ansible would
# otherwise shadow it): export ANSIBLE_COLLECTIONS_PATH=$PWD/build/collections to use it by hand.
mkdir -p build/collections/ansible_collections/npuops
[ -e build/collections/ansible_collections/npuops/fleet ] || ln -s "$PWD" build/collections/ansible_collections/npuops/fleet

# promtool (`promtool check rules` / `test rules` in the lint stage) from Debian's prometheus package,
# unpacked, not installed: no prometheus daemon on this machine. Cached in build/tools.
if [ ! -x build/tools/prometheus/usr/bin/promtool ]; then
  echo "bootstrap: promtool from the Debian prometheus package"
  mkdir -p build/tools/cache
  (cd build/tools/cache && rm -f prometheus_*.deb && apt-get download -q prometheus 2>/dev/null >/dev/null)
  rm -rf build/tools/prometheus
  dpkg-deb -x build/tools/cache/prometheus_*.deb build/tools/prometheus
fi
ln -sf "$PWD/build/tools/prometheus/usr/bin/promtool" .venv/bin/promtool
