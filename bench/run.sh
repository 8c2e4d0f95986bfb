#!/usr/bin/env bash
# One command for the whole benchmark (`make bench` calls this).
#   bash bench/run.sh [harness options...]     e.g. --quick, --systems conveyor,celery
# 1. installs the peers into .bench-venv/ (never the project's .venv),
# 2. makes sure the project's .venv exists (Conveyor's worker runs on .venv/bin/python),
# 3. runs the harness on .bench-venv/bin/python; results go to bench/results/latest.json.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v redis-server >/dev/null || {
  echo "bench: redis-server not found; install it (Debian/Ubuntu: apt-get install -y redis-server)" >&2
  exit 1
}
bash bench/setup_peers.sh

if [[ ! -x .venv/bin/python ]]; then
  echo "bench: creating the project's .venv (pip install -e '.[redis,postgres]')"
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[redis,postgres]'
fi

exec .bench-venv/bin/python -m bench.harness "$@"
