#!/usr/bin/env bash
# Restart orders-api: stop the running instance (run/app.pid), start a new one in the background
# (output to run/app.log), wait until it listens, and say where.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p run
if [ -f run/app.pid ] && kill -0 "$(cat run/app.pid)" 2>/dev/null; then
  old=$(cat run/app.pid)
  kill "$old"
  for _ in $(seq 50); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
  echo "stopped orders-api (pid $old)"
fi
rm -f run/app.port
python -m app.server >> run/app.log 2>&1 &
for _ in $(seq 200); do [ -s run/app.port ] && break; sleep 0.05; done
if [ ! -s run/app.port ]; then
  echo "orders-api did not start; last lines of run/app.log:"
  tail -n 20 run/app.log
  exit 1
fi
echo "orders-api $(git rev-parse --short HEAD) up on 127.0.0.1:$(cat run/app.port) (pid $(cat run/app.pid))"
