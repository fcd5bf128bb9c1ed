#!/usr/bin/env bash
# tests/cli/test_gpu_check.sh: scripts/gpu_check.sh up to the point a GPU is needed (issue 31).
# pack with --binary-dir (this build's binaries, not an nvcc build: CI has no GPU and no time for
# one) into a temporary folder: the runtime .debs (scripts/offline_bundle.sh, apt-get download:
# needs the Debian mirror), the binaries, the source; then `run --parts "env cpu adam"` from the
# pack: unpacked into a prefix, every binary resolves its libraries under the bundle's env.sh, a
# 2-step CPU training run passes, the CPU AdamW benchmark runs (a small n), the summary table lists
# the parts as pass; a part that needs a GPU binary this build lacks fails in the table (never
# passes silently); a -march=native pack names its CPU flags and a node lacking one fails env by
# name; bad arguments are refused with a message naming them.
# Usage: test_gpu_check.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
BUILD="$(dirname "$(readlink -f "$ZEROTUNE")")"
PACK="$WORK/pack"
cd "$REPO" || fatal "no repository at $REPO"

# --- pack ------------------------------------------------------------------------------------
start=$(date +%s)
bash scripts/gpu_check.sh pack --out "$PACK" --binary-dir "$BUILD" >"$WORK/pack.log" 2>&1
status=$?
check pack "$status" "$WORK/pack.log" "gpu_check.sh pack exited with $status"
debs=$(ls "$PACK"/bundle/debs/*.deb 2>/dev/null | wc -l)
[[ -f "$PACK/bin.tar.xz" && -f "$PACK/gpu_check.sh" && -f "$PACK/bundle/MANIFEST" && "$debs" -gt 10 ]]
check pack-contents $? "$WORK/pack.log" "the pack lacks bin.tar.xz, gpu_check.sh, bundle/MANIFEST or the .debs ($debs)"
tar -tJf "$PACK/bin.tar.xz" | grep -qx 'b/zerotune'
check pack-binaries $? "" "bin.tar.xz has no b/zerotune: $(tar -tJf "$PACK/bin.tar.xz" | tr '\n' ' ')"
# A -march=native build (ZT_NATIVE=ON) names this CPU's instruction-set flags for the node to check.
if grep -q '^ZT_NATIVE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  grep -q 'avx2' "$PACK/cpu_flags.txt" 2>/dev/null
  check native-flags $? "" "a -march=native build's pack has no cpu_flags.txt naming avx2: $(cat "$PACK/cpu_flags.txt" 2>&1)"
else
  [[ ! -e "$PACK/cpu_flags.txt" ]]
  check native-flags $? "" "a portable build's pack has a cpu_flags.txt"
fi
echo "     pack took $(( $(date +%s) - start )) s, $debs .debs"

# --- run the CPU parts from the pack -----------------------------------------------------------
start=$(date +%s)
ZT_ADAM_ARGS="--n 1000000 --repeats 1" bash "$PACK/gpu_check.sh" run --out "$WORK/results" --work "$WORK/w" \
  --parts "env cpu adam" >"$WORK/run.log" 2>&1
status=$?
check run-cpu-parts "$status" "$WORK/run.log" "gpu_check.sh run --parts 'env cpu adam' exited with $status"
grep -q '^| env | pass |' "$WORK/results/summary.md" && grep -q '^| cpu | pass | 2 steps, loss [0-9.]*' "$WORK/results/summary.md" &&
  grep -q '^| adam | pass | .*in place 4 r + 3 w .* GB/s.*offload step, 1 pass' "$WORK/results/summary.md"
check summary-table $? "$WORK/results/summary.md" "the summary does not list env, cpu and adam (with its GB/s) as pass"
# Every unpacked binary resolves its libraries with the bundle's environment alone (no build tree).
missing=$(bash -c "source '$WORK/w/zt/env.sh' && ldd '$WORK/w/bin/'*" 2>&1 | grep -c 'not found')
check ldd-resolves "$([[ $missing == 0 ]]; echo $?)" "" "$missing libraries not found under the bundle's env.sh"
[[ -f "$WORK/results/log.txt" && -f "$WORK/results/ldd.txt" && -f "$WORK/results/cpu.txt" ]]
check results-folder $? "" "the results folder lacks log.txt, ldd.txt or cpu.txt: $(ls "$WORK/results" | tr '\n' ' ')"
echo "     run took $(( $(date +%s) - start )) s"

# --- a GPU part without its binary fails in the table; bad arguments ---------------------------
# A copy of the pack whose binaries lack zt_gpu_tests (a CPU build's pack; this build may have it).
PACK2="$WORK/pack-without-gpu-tests"
mkdir -p "$PACK2/x" && cp -r "$PACK/bundle" "$PACK/gpu_check.sh" "$PACK2/" && tar -C "$PACK2/x" -xJf "$PACK/bin.tar.xz" &&
  rm -f "$PACK2/x/b/zt_gpu_tests" && tar -C "$PACK2/x" -czf "$PACK2/bin.tar.gz" b && rm -rf "$PACK2/x"  # (gzip: an older pack's form)
check pack-copy $? "" "could not copy the pack without zt_gpu_tests"
bash "$PACK2/gpu_check.sh" run --out "$WORK/results2" --work "$WORK/w2" --parts tests >"$WORK/run2.log" 2>&1
status=$?
[[ $status != 0 ]] && grep -q '^| tests | fail | not in the pack: zt_gpu_tests |' "$WORK/results2/summary.md"
check gpu-part-fails $? "$WORK/run2.log" "the tests part passed or was left out without zt_gpu_tests (status $status)"
# A node whose CPU lacks a flag the (-march=native) binaries may use: env fails naming it, nothing runs.
PACK3="$WORK/pack-foreign-cpu"
cp -r "$PACK" "$PACK3" && echo "avx2 avx512_imaginary" >"$PACK3/cpu_flags.txt"
bash "$PACK3/gpu_check.sh" run --out "$WORK/results3" --work "$WORK/w3" --parts "env cpu" >"$WORK/run3.log" 2>&1
status=$?
[[ $status != 0 ]] && grep -q '^| env | fail | .*lacks: avx512_imaginary |' "$WORK/results3/summary.md" &&
  ! grep -q '^| cpu |' "$WORK/results3/summary.md"
check foreign-cpu $? "$WORK/run3.log" "a node lacking a flag of cpu_flags.txt was not refused by name (status $status)"
bash "$PACK/gpu_check.sh" run --parts "env bogus" >"$WORK/bad1.log" 2>&1
[[ $? == 2 ]] && grep -q "unknown part 'bogus'" "$WORK/bad1.log"
check unknown-part $? "$WORK/bad1.log" "an unknown part is not refused by name"
bash scripts/gpu_check.sh pack --out "$WORK/p2" --cuda-arch nine >"$WORK/bad2.log" 2>&1
[[ $? == 2 ]] && grep -q "cuda-arch 'nine' is not an sm number" "$WORK/bad2.log"
check bad-arch $? "$WORK/bad2.log" "a bad --cuda-arch is not refused by name"
bash scripts/gpu_check.sh pack --out "$WORK/p3" --binary-dir "$WORK/nowhere" >"$WORK/bad3.log" 2>&1
[[ $? == 2 ]] && grep -q "binary-dir .* has no zerotune executable" "$WORK/bad3.log"
check bad-binary-dir $? "$WORK/bad3.log" "a --binary-dir without zerotune is not refused by name"
finish
