#!/usr/bin/env bash
# Start the TLS edge in the background (output to run/edge.log) and wait until it listens.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p run
rm -f run/edge.port
python -m edge.server >> run/edge.log 2>&1 &
for _ in $(seq 200); do [ -s run/edge.port ] && break; sleep 0.05; done
if [ ! -s run/edge.port ]; then
  echo "the edge did not start; last lines of run/edge.log:"
  tail -n 20 run/edge.log
  exit 1
fi
echo "api.internal edge up on 127.0.0.1:$(cat run/edge.port) (pid $(cat run/edge.pid))"
