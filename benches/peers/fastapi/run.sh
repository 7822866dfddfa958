#!/usr/bin/env bash
# uvicorn + FastAPI serving GET /noop on 127.0.0.1:PORT, one worker, uvloop + httptools, no access log (the
# fastest stock uvicorn setup), for benches/run.
#   bash benches/peers/fastapi/run.sh PORT     # foreground; SIGTERM stops it
# Installs into $VENV (default benches/.peers/fastapi-venv, git-ignored) on first use.
# Prints "fastapi VERSION uvicorn VERSION python VERSION" before serving.
set -euo pipefail
PORT="${1:?usage: run.sh PORT}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VENV:-$HERE/../../.peers/fastapi-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import fastapi, uvicorn, uvloop, httptools' 2>/dev/null; then
  "$VENV/bin/pip" install -q fastapi uvicorn uvloop httptools
fi
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m, platform
print(f"fastapi {m.version('fastapi')} uvicorn {m.version('uvicorn')} python {platform.python_version()}")
PY
cd "$HERE"
exec "$VENV/bin/uvicorn" app:app --host 127.0.0.1 --port "$PORT" --workers 1 --no-access-log \
  --loop uvloop --http httptools --log-level warning
