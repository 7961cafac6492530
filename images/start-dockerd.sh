#!/usr/bin/env bash
# Start the Docker engine if it is not answering yet: dockerd with the overlay2 storage driver (never vfs, which
# copies a whole image per container), logs in $DOCKERD_LOG. Idempotent: a running engine is left alone. Waits
# until the engine answers (at most $DOCKERD_WAIT_S seconds) and exits non-zero, with the log's tail, if it does
# not. Needs root (or a user allowed to start dockerd).
set -euo pipefail
LOG="${DOCKERD_LOG:-/var/log/skyrl-dockerd.log}"
WAIT_S="${DOCKERD_WAIT_S:-60}"

engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if engine_up; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "dockerd is not installed (Debian/Ubuntu: apt-get install docker.io)" >&2
  exit 1
fi
# a socket or pid file left by an engine that died would make the new one refuse to start
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  rm -f /var/run/docker.pid /var/run/docker.sock
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  mkdir -p "$(dirname "$LOG")"
  # containerd is started by dockerd itself when none runs; setsid: the engine outlives the calling shell
  setsid dockerd --storage-driver overlay2 >>"$LOG" 2>&1 </dev/null &
fi
for _ in $(seq 1 "$((WAIT_S * 4))"); do
  if engine_up; then
    exit 0
  fi
  sleep 0.25
done
echo "the Docker engine did not answer within ${WAIT_S} s; the last lines of $LOG:" >&2
tail -n 30 "$LOG" >&2 || true
exit 1
