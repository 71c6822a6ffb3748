#!/usr/bin/env bash
# Periodic job (NOT in CI): mutation score of the core with mutmut (pip install mutmut; 3.x).
# Works on a throwaway copy of the repository so the checkout is never touched, and writes
# the results to $OUT (default ./mutation-results).  Usage:
#   scripts/mutation.sh [paths to mutate ...]   (default: zephon_ref/engine zephon_ref/ops zephon_ref/work)
# Environment: MUTATION_TESTS (the tests each mutant runs against; default the engine, operator and
# invariant tests plus the resume machines), MUTATION_CHILDREN (parallel mutants, default 1),
# MUTATION_ONLY (space-separated mutant names, e.g. the survivors of a previous run, to run only those).
# docs/mutation.md records the last score and the surviving mutants that matter.
set -euo pipefail
ROOT="${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}"  # set ROOT when running a copy of this script
OUT="${OUT:-$ROOT/mutation-results}"
PATHS=("$@")
[ ${#PATHS[@]} -gt 0 ] || PATHS=(zephon_ref/engine zephon_ref/ops zephon_ref/work)
# only tests that pass on a correct engine can kill a mutant: not tests/quality/test_mutants.py, whose
# tests assert that the suite fails under a planted bug (see docs/mutation.md)
TESTS="${MUTATION_TESTS:-tests/unit/test_engine_rules.py tests/unit/test_engine_steps.py tests/unit/test_ops_kit.py tests/properties/test_invariants.py tests/properties/test_machines.py}"
CHILDREN="${MUTATION_CHILDREN:-1}"
GLOBS=()
for p in "${PATHS[@]}"; do case "$p" in *.py) GLOBS+=("$p");; *) GLOBS+=("${p%/}/*");; esac; done
WORK="$(mktemp -d /tmp/zephon-ref-mutation.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 cp --parents -t "$WORK")
cd "$WORK"
to_list() { printf '"%s", ' "$@" | sed 's/, $//'; }
# shellcheck disable=SC2086
cat >> pyproject.toml <<TOML

[tool.mutmut]
source_paths = ["zephon_ref"]
only_mutate = [$(to_list "${GLOBS[@]}")]
pytest_add_cli_args_test_selection = [$(to_list $TESTS)]
also_copy = ["properties", "sim", "tests", "docs", "README.md"]
pytest_add_cli_args = ["-p", "no:xdist", "-p", "no:randomly", "-q", "-x"]
TOML
export HYPOTHESIS_PROFILE=ci
# shellcheck disable=SC2086
mutmut run --max-children "$CHILDREN" ${MUTATION_ONLY:-} || true
mkdir -p "$OUT"
mutmut results --all true > "$OUT/results.txt" 2>&1 || mutmut results > "$OUT/results.txt" 2>&1 || true
cp -r mutants/*.meta "$OUT/" 2>/dev/null || true
python3 - "$OUT/results.txt" <<'PY'
import collections, sys
counts = collections.Counter(line.rsplit(":", 1)[-1].strip() for line in open(sys.argv[1]) if ":" in line)
print(dict(counts))
PY
