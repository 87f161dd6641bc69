#!/usr/bin/env bash
# Start the thumbs worker in the background (output to run/worker.log; pid in run/worker.pid).
# Refuses while another worker runs (a zombie awaiting its reaper does not count; one that was
# just sent SIGTERM gets 3 s to go).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p run
running() { [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]; }
if [ -f run/worker.pid ]; then
  old=$(cat run/worker.pid)
  for _ in $(seq 30); do running "$old" || break; sleep 0.1; done
  if running "$old"; then
    echo "a worker is already running (pid $old); stop it first"
    exit 1
  fi
fi
python -m worker.main >> run/worker.log 2>&1 &
echo $! > run/worker.pid
sleep 0.2
running "$(cat run/worker.pid)" || { tail -n 20 run/worker.log; exit 1; }
echo "thumbs worker started (pid $(cat run/worker.pid))"
