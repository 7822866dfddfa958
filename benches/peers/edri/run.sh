#!/usr/bin/env bash
# EDRI from PyPI serving GET /noop on 127.0.0.1:PORT, for benches/run.
#   bash benches/peers/edri/run.sh PORT        # foreground; SIGTERM stops it
#   bash benches/peers/edri/run.sh PORT fanout_app.py   # another app of this folder (the fanout section's)
# Installs into $VENV (default benches/.peers/edri-venv, git-ignored) on first use. EDRI 2026.10.4 needs
# Python >= 3.12 (PATH, then pyenv versions); without one it falls back to 2026.6.1 on the Python there is.
# Prints "edri VERSION python VERSION" before serving.
set -euo pipefail
PORT="${1:?usage: run.sh PORT [APP]}"
APP="${2:-noop_app.py}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VENV:-$HERE/../../.peers/edri-venv}"

pick_python() {
  local c
  for c in "${PYTHON:-}" python3.12 python3.13 "$HOME"/.pyenv/versions/3.12*/bin/python3 "$HOME"/.pyenv/versions/3.13*/bin/python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"; return
    fi
  done
  command -v python3
}

if [ ! -x "$VENV/bin/python" ]; then
  "$(pick_python)" -m venv "$VENV"
fi
if "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)'; then
  WANT=2026.10.4
else
  WANT=2026.6.1
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('edri') != '$WANT')" 2>/dev/null \
   || ! "$VENV/bin/python" -c "import uvicorn" 2>/dev/null; then
  "$VENV/bin/pip" install -q "edri[uvicorn]==$WANT"
fi
echo "edri $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("edri"))') python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())')"
exec "$VENV/bin/python" "$HERE/$APP" "$PORT"
