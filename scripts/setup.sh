#!/usr/bin/env bash
# Conveyor: install everything the project needs to build and test, idempotently.
# System (Debian 12, root only, skipped when already present): redis-server (+ redis-cli,
# redis-benchmark), chromium and Debian's PostgreSQL server (initdb/pg_ctl: the tests start a
# private cluster; the service Debian's package creates is stopped again, never used). Python: .venv in the repo with `pip install -e '.[dev]'`.
# No Playwright browser download: tests drive /usr/bin/chromium via executable_path.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

# --- system packages -------------------------------------------------------------------------
missing=()
for bin in redis-server redis-cli redis-benchmark; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
[ -x /usr/bin/chromium ] || missing+=(/usr/bin/chromium)
pkgs=(redis-server redis-tools chromium fonts-liberation)
# Any installed major version will do (tests/support/pg_proc.py picks the newest).
if ! compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
  missing+=(postgresql); pkgs+=(postgresql)
  new_pg=1
fi
# Debian's own python3 needs python3-venv for `python3 -m venv` (pyenv/other builds have ensurepip).
if ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then missing+=(ensurepip); pkgs+=(python3-venv); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${missing[*]}; run this script as root (or apt-get install redis-server chromium)" >&2
    exit 1
  fi
  echo "setup: installing system packages (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  # Debian starts a cluster on port 5432 when it can; the tests do not use it: stop it.
  if [ "${new_pg:-0}" = 1 ] && command -v pg_ctlcluster >/dev/null 2>&1; then
    for c in /etc/postgresql/*/main; do
      [ -d "$c" ] || continue
      v=$(basename "$(dirname "$c")")
      pg_ctlcluster "$v" main stop >/dev/null 2>&1 || true
    done
  fi
fi

# --- python virtualenv -----------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# Reinstall only when pyproject.toml changed or the package is not installed (keeps `make` fast).
stamp="$VENV/.setup-stamp"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "${SETUP_FORCE:-0}" = 1 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] \
   || ! "$VENV/bin/python" -c "import importlib.metadata as m; m.version('conveyor-jobs')" 2>/dev/null; then
  echo "setup: pip install -e '.[dev]'"
  log=$(mktemp)
  # Quiet on success; the full pip output (errors included) on failure.
  if ! { "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip \
         && "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]'; } >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; echo "setup: pip install failed" >&2; exit 1
  fi
  rm -f "$log"
  echo "$want" >"$stamp"
fi

# --- summary ---------------------------------------------------------------------------------
echo "setup: ok"
echo "  $(redis-server --version | cut -d' ' -f1-3)"
echo "  $(/usr/bin/chromium --version 2>/dev/null || echo 'chromium: unavailable')"
pg_ctl_bin=$(compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' | sort -V | tail -n1 || true)
if [ -n "$pg_ctl_bin" ]; then echo "  $("$pg_ctl_bin" --version)"; else echo "  PostgreSQL: unavailable"; fi
echo "  $("$VENV/bin/python" --version), conveyor-jobs $("$VENV/bin/python" -c \
  "import importlib.metadata as m; print(m.version('conveyor-jobs'))")"
