#!/usr/bin/env bash
# Create the benchmark's own virtualenvs and install the peer job systems there.
#   .bench-venv/           harness + celery, rq, dramatiq, saq, huey (bench/peers-requirements.txt)
#   .bench-venv/envs/arq/  arq (bench/peers-requirements-arq.txt; redis-py pin conflicts with kombu)
#   .bench-venv/envs/bullmq/  BullMQ's Python port (bench/peers-requirements-bullmq.txt; exact pins)
#   bench/peers_node/node_modules/  BullMQ for Node (npm ci from package-lock.json; needs node, npm)
#   ruby-sidekiq (Debian's Sidekiq 6.4.1 on Ruby 3.1) via apt-get, system-wide: as root only;
#     otherwise it says what to run. Missing node or ruby only skips that system (the harness
#     records why).
#   .bench-venv/envs/pg/   procrastinate, pgqueuer (bench/peers-requirements-pg.txt; PostgreSQL peers)
# Never touches the project's .venv. Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

make_venv() {  # make_venv DIR REQUIREMENTS
  local dir="$1" req="$2" stamp="$1/.requirements.sha256"
  local want; want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [[ -x "$dir/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "setup_peers: $dir is up to date"
    return
  fi
  [[ -x "$dir/bin/python" ]] || "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
  echo "setup_peers: installed $req into $dir"
}

make_venv .bench-venv bench/peers-requirements.txt
mkdir -p .bench-venv/envs
make_venv .bench-venv/envs/arq bench/peers-requirements-arq.txt
make_venv .bench-venv/envs/pg bench/peers-requirements-pg.txt
make_venv .bench-venv/envs/bullmq bench/peers-requirements-bullmq.txt

setup_node() {  # BullMQ into bench/peers_node/node_modules, pinned by package-lock.json
  local dir=bench/peers_node stamp=bench/peers_node/node_modules/.lock.sha256
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "setup_peers: node/npm not found: bullmq is skipped (Debian: apt-get install nodejs npm)" >&2
    return
  fi
  local want; want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "setup_peers: $dir/node_modules is up to date"
    return
  fi
  # npm install, not npm ci: the lock pins every version, but this registry mirror lacks
  # msgpackr-extract's optional per-platform builds, which npm ci insists on
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
  echo "$want" > "$stamp"
  echo "setup_peers: installed bullmq into $dir/node_modules"
}

setup_sidekiq() {  # Debian's ruby-sidekiq (6.4.1): system packages, so root only
  if command -v ruby >/dev/null && ruby -e 'require "sidekiq"' 2>/dev/null; then
    echo "setup_peers: sidekiq $(ruby -e 'require "sidekiq"; print Sidekiq::VERSION') is installed"
    return
  fi
  if [[ "$(id -u)" != 0 ]]; then
    echo "setup_peers: sidekiq is not installed; as root: apt-get install -y ruby-sidekiq" >&2
    return
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ruby-sidekiq >/dev/null
  echo "setup_peers: installed ruby-sidekiq via apt-get"
}

setup_node
setup_sidekiq
