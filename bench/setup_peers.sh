#!/usr/bin/env bash
# Create the benchmark's own virtualenvs and install the peer job systems there.
#   .bench-venv/           harness + celery, rq, dramatiq, saq, huey (bench/peers-requirements.txt)
#   .bench-venv/envs/arq/  arq (bench/peers-requirements-arq.txt; redis-py pin conflicts with kombu)
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
