#!/usr/bin/env bash
# Regenerates docs/loaders/*.json and the table of docs/loaders.md at the documented budget
# (EXAMPLES examples x STEPS moves per property, derandomized; process workers pinned to 0 for the peers
# whose workers are processes).  Usage: bash scripts/loaders_table.sh [LOADER ...]; EXAMPLES=60 STEPS=10.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
E=${EXAMPLES:-60}
S=${STEPS:-10}
declare -A PINS=(
  [zephon_ref]="" [zephon]="" [torchdata-nodes]=""
  [torchdata]="--set workers=0" [grain]="--set workers=0" [datasets]="--set workers=0"
  [litdata]="--set workers=0" [streaming]="--set workers=0"
)
loaders=("$@")
[ ${#loaders[@]} -eq 0 ] && loaders=(zephon_ref zephon torchdata torchdata-nodes grain datasets litdata streaming)
for l in "${loaders[@]}"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  PYTHONPATH=. $PY -m properties.loaders --loader "$l" --examples "$E" --steps "$S" ${PINS[$l]} \
      --json "docs/loaders/$l.json" > "${LOGDIR:-/tmp}/loaders-$l.txt" 2>&1
  rc=$?
  echo "== $l: exit $rc, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
