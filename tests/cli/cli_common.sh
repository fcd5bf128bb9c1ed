# tests/cli/cli_common.sh: what the cli tests share (sourced, not a test itself): the work
# directory, the failure count, `fatal`, `pass`/`problem`, `expect_error` (a run that must fail
# with one clear message) and `make_good_inputs` (a tiny LLaMA, a data set, a DeepSpeed JSON).
# The sourcing script sets ZEROTUNE and PYTHON first. Every case counts: a case that cannot run
# its check is a failure, never a skip.

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
MAKE_SHARD="$REPO/tests/oracle/make_token_shard.py"
WORK="$(mktemp -d /tmp/zt-cli.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

failures=0
cases=0
fatal() { echo "FATAL: $*" >&2; exit 1; }

# Output that means zerotune did not handle the error itself: C++/MPI aborts, signal reports,
# HDF5's default error stack, Python-style tracebacks, exceptions that are not zt::Error.
NOISE='terminate called|what\(\):|Aborted|core dumped|Segmentation fault|MPI_ABORT|HDF5-DIAG|Traceback|internal error'

# check NAME CONDITION_STATUS DETAIL_FILE MESSAGE: one case; fails with MESSAGE and the file's head.
check() {
  local name="$1" ok="$2" detail="$3" message="$4"
  cases=$((cases + 1))
  if [[ "$ok" -eq 0 ]]; then
    echo "ok   $name"
  else
    failures=$((failures + 1))
    echo "FAIL $name: $message"
    [[ -n "$detail" && -f "$detail" ]] && sed 's/^/       | /' "$detail" | head -30
  fi
}

# expect_error NAME PHRASE... -- ZEROTUNE_ARGS...
# Runs zerotune; the case passes when it exits with status 1..127, stderr holds every PHRASE
# (fixed strings) and the "zerotune <command>: error (rank 0): " prefix, and nothing matches NOISE.
expect_error() {
  local name="$1"; shift
  local phrases=()
  while [[ "$1" != "--" ]]; do phrases+=("$1"); shift; done
  shift
  local stdout="$WORK/$name.stdout" stderr="$WORK/$name.stderr" problems=() phrase status
  cases=$((cases + 1))
  "$ZEROTUNE" "$@" >"$stdout" 2>"$stderr"
  status=$?
  if [[ "$status" -eq 0 ]]; then problems+=("exit status 0, expected non-zero"); fi
  if [[ "$status" -ge 128 ]]; then problems+=("killed by signal $((status - 128))"); fi
  if ! grep -qE "^zerotune [a-z]+: error \(rank 0\): " "$stderr"; then
    problems+=("no 'zerotune <command>: error (rank 0): ' line on stderr")
  fi
  for phrase in "${phrases[@]}"; do
    if ! grep -qF -- "$phrase" "$stderr"; then problems+=("stderr lacks: $phrase"); fi
  done
  if grep -qE "$NOISE" "$stdout" "$stderr"; then problems+=("crash or library noise in the output"); fi
  if [[ "${#problems[@]}" -eq 0 ]]; then
    echo "ok   $name: $(grep -m1 -E "^zerotune [a-z]+: error" "$stderr")"
  else
    failures=$((failures + 1))
    echo "FAIL $name (exit status $status)"
    printf '       %s\n' "${problems[@]}"
    echo "     command: zerotune $*"
    echo "     stderr:"; sed 's/^/       | /' "$stderr" | head -20
  fi
}

# The good inputs: $WORK/model (tiny LLaMA, vocab 256), $WORK/data (16 samples), $WORK/ds.json;
# M and D name the first two.
make_good_inputs() {
  "$ZEROTUNE" init --config "$REPO/data/tiny-llama/config.json" --out "$WORK/model" --seed 1 >/dev/null \
    || fatal "zerotune init of the good model failed"
  "$PYTHON" "$MAKE_SHARD" --out "$WORK/data" --samples 16 --vocab 256 --min-len 8 --max-len 24 --seed 0 >/dev/null \
    || fatal "making the good data set failed"
  cp "$REPO/data/tiny-llama/ds_config.json" "$WORK/ds.json"
  M="$WORK/model" D="$WORK/data"
}

# The end of a test script: the count, and the exit status.
finish() {
  echo "$((cases - failures)) of $cases cases passed"
  [[ "$failures" -eq 0 && "$cases" -gt 0 ]]
}
