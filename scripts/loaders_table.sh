#!/usr/bin/env bash
# Regenerates docs/loaders/*.json and the table of docs/loaders.md at the documented budget
# (EXAMPLES examples x STEPS moves per property, derandomized, each failure shrunk for at most SHRINK
# machine runs; each loader's properties in JOBS processes at once, 3 for torchdata-nodes, 1 for streaming).
# Process workers are drawn for torchdata (StatefulDataLoader: workers 0 or 2, persistent or not); pinned
# to 0 for the other peers whose workers are processes (time: a worker process costs 0.5-1 s per restore).
# Usage: bash scripts/loaders_table.sh [LOADER ...]; EXAMPLES=60 STEPS=10 SHRINK=150 JOBS=2.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
E=${EXAMPLES:-60}
S=${STEPS:-10}
K=${SHRINK:-150}
J=${JOBS:-2}
declare -A PINS=(
  [zephon_ref]="" [zephon]="" [torchdata-nodes]="" [torchdata]=""
  [grain]="--set workers=0" [datasets]="--set workers=0"
  [litdata]="--set workers=0" [streaming]="--set workers=0"
)
# torchdata-nodes is sleep-bound (its threads' shutdown waits on queue timeouts): one more process helps
declare -A JOBS_OF=([torchdata-nodes]=3)
loaders=("$@")
[ ${#loaders[@]} -eq 0 ] && loaders=(zephon_ref zephon torchdata torchdata-nodes grain datasets litdata streaming)
all=$(date +%s)
for l in "${loaders[@]}"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  PYTHONPATH=. $PY -m properties.loaders --loader "$l" --examples "$E" --steps "$S" --shrink-runs "$K" \
      --jobs "${JOBS_OF[$l]:-$J}" ${PINS[$l]} --json "docs/loaders/$l.json" > "${LOGDIR:-/tmp}/loaders-$l.txt" 2>&1
  rc=$?
  echo "== $l: exit $rc, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "== all: $(( $(date +%s) - all )) s"
