#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the live-plane tests and print its SQLAlchemy URL.
# Installs Debian's postgresql package when the server binaries are missing.
set -euo pipefail
PORT="${GPUPLANE_PG_PORT:-55432}"
DIR="${GPUPLANE_PG_DIR:-/tmp/gpuplane-pg}"
bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq postgresql >&2
  bindir="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
fi
run_as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --home-dir "$DIR" postgres
fi
if ! run_as_pg "$bindir/pg_isready" -h 127.0.0.1 -p "$PORT" -q 2>/dev/null; then
  rm -rf "$DIR"; mkdir -p "$DIR"
  [ "$(id -u)" -eq 0 ] && chown postgres "$DIR"
  run_as_pg "$bindir/initdb" -D "$DIR/data" -U gpuplane --auth=trust -E UTF8 >/dev/null
  run_as_pg "$bindir/pg_ctl" -D "$DIR/data" -l "$DIR/log" -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1" -w start >/dev/null
  run_as_pg "$bindir/createdb" -h 127.0.0.1 -p "$PORT" -U gpuplane gpuplane
fi
echo "postgresql+psycopg2://gpuplane@127.0.0.1:${PORT}/gpuplane"
