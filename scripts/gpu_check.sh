#!/usr/bin/env bash
# scripts/gpu_check.sh: zerotune's checks on a bare GPU node (a GPU driver and the CUDA libraries,
# e.g. a python3 with the nvidia-* wheels; no compilers, no MPI/HDF5/Boost, no network), from
# binaries built on a Debian 12 build machine. What produced ../shared/gpu/RESULTS-2026-11-27.md.
#
#   On the build machine (Debian 12, apt, network), from the project root:
#     scripts/gpu_check.sh pack [--out DIR] [--cuda-arch 90] [--binary-dir BUILD]
#       -> DIR (default .gpu/): bin.tar.xz (zerotune, zt_gpu_tests, bench tools: an nvcc build for
#          --cuda-arch with -DZT_NATIVE=OFF, so the node's CPU needs no AVX-512; xz, since a lent
#          GPU machine takes 64 MiB a call: ZT_PACK_XZ_LEVEL=-6 for the smallest), bundle/ (the
#          runtime .debs of scripts/offline_bundle.sh pack --no-build-deps, about 38 MB, and the
#          source tree), gpu_check.sh. The CUDA libraries (cudart, cuBLASLt, NCCL, cuDNN) are not
#          packed: the node's own are used. --binary-dir packs the binaries of an existing build
#          instead of building (the CI test packs its CPU or emulated build this way); when that
#          build is -march=native (ZT_NATIVE=ON), cpu_flags.txt lists this CPU's instruction-set
#          flags, and run's env part fails, naming them, on a node whose CPU lacks any.
#   Copy DIR to the node, then there:
#     bash DIR/gpu_check.sh run [--out RESULTS] [--work WORKDIR] [--parts "env tests ..."]
#   Parts (default: all but prof, in this order): env (unpack, find the CUDA libraries, every
#   binary resolves its libraries), cpu (a 2-step CPU training run: the bundle works), tests
#   (zt_gpu_tests: kernel and backend suites), selftest, pytests (tests/gpu/test_gpu_*.py against
#   the CPU backend; ZT_PYTESTS, a grep -E pattern of file names, picks which, ZT_PYTESTS_JOBS how
#   many at once), sanitize (compute-sanitizer memcheck and racecheck on the kernel suites;
#   ZT_SANITIZE_TOOLS, e.g. "racecheck synccheck", and ZT_SANITIZE_TESTS, a --run_test filter such
#   as cuda_attention/tensor_core_head_dims, narrow it),
#   bench7b (llama-7B shape: GEMM peak, kernels, LoRA vs HF+PEFT), opt13 (opt-1.3b fp16 at
#   ZeRO-0/3/3+offload, offload with --delayed-param-update and offload_optimizer.ratio 0.3, and
#   each offload alone), adam (the CPU AdamW against the
#   node's memory bandwidth, every core), prof (where a LoRA step's time goes). Each part is
#   time-boxed; everything goes to RESULTS (default ./gpu-results): log.txt, one file per part,
#   summary.md (a table: part, pass/fail, key figures, seconds), printed at the end. Exit status:
#   0 when every part passed.
#   About 25 minutes for all parts on an H100.
set -uo pipefail

script_path="$(readlink -f "${BASH_SOURCE[0]}")"
die() { echo "gpu_check.sh: $*" >&2; exit 2; }
usage() { sed -n '2,30p' "$script_path" | sed 's/^# \{0,1\}//'; exit 2; }

KERNEL_SUITES=cuda_attention,cuda_gemm,cuda_loss,cuda_memory,cuda_norms,cuda_optim,cuda_pointwise
BINARIES=(zerotune zt_gpu_tests bench_gemm_peak bench_kernels make_bench_data bench_cpu_adam)

# ---- pack ---------------------------------------------------------------------------------

# This CPU's instruction-set flags that a compiler's -march=native may use (from /proc/cpuinfo;
# AMD's sse4a, which GCC never emits unasked, left out), one line, sorted.
isa_flags() {
  grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E -x 'avx|avx2|fma|f16c|bmi1|bmi2|abm|popcnt|movbe|adx|sse4_1|sse4_2|ssse3|sha_ni|gfni|vaes|vpclmulqdq|avx_vnni|avx512[a-z0-9_]*|amx[a-z0-9_]*' |
    sort | tr '\n' ' '
}

pack() {
  local out=.gpu arch=90 binary_dir="" build
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --out) out="$2"; shift 2 ;;
      --cuda-arch) arch="$2"; shift 2 ;;
      --binary-dir) binary_dir="$2"; shift 2 ;;
      *) die "pack: unknown argument '$1' (pack [--out DIR] [--cuda-arch 90] [--binary-dir BUILD])" ;;
    esac
  done
  [[ -f CMakeLists.txt && -f scripts/offline_bundle.sh ]] || die "pack: run it from the project root"
  [[ "$arch" =~ ^[0-9]+[a-z]?$ ]] || die "pack: --cuda-arch '$arch' is not an sm number such as 90 or 90a"
  if [[ -n "$binary_dir" ]]; then
    build="$(readlink -f "$binary_dir")"
    [[ -x "$build/zerotune" ]] || die "pack: --binary-dir $binary_dir has no zerotune executable"
  else
    command -v nvcc >/dev/null || die "pack: needs nvcc (CUDA toolkit) to build for sm_$arch, or --binary-dir"
    build=${BUILD_GPU:-/tmp/zt-gpu-build}
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=ON -DZT_EMULATE=OFF -DZT_NATIVE=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null || die "pack: cmake configure failed"
    cmake --build "$build" -j"$(nproc)" --target "${BINARIES[@]}" || die "pack: build failed"
  fi
  # Replaces an earlier pack only: never empties a folder that holds anything else.
  if [[ -e "$out" && -n "$(ls -A "$out" 2>/dev/null)" && ! -f "$out/gpu_check.sh" ]]; then
    die "pack: --out $out exists and is not an earlier pack (no gpu_check.sh in it): give a new folder"
  fi
  rm -rf "$out" && mkdir -p "$out/b" || die "pack: cannot create $out"
  out="$(readlink -f "$out")"
  bash scripts/offline_bundle.sh pack "$out/bundle" --binary "$build/zerotune" --no-build-deps ||
    die "pack: offline_bundle.sh pack failed"
  # The node's own CUDA libraries are used (the driver's version decides which work there).
  rm -rf "$out/bundle/extra-libs" && mkdir -p "$out/bundle/extra-libs"
  # The binary travels once, in bin.tar.xz (run copies it into the bundle): the pack stays under
  # the 64 MiB a carried folder may hold on the lent GPU machines.
  rm -f "$out/bundle/bin/zerotune"
  local name path found=()
  for name in "${BINARIES[@]}"; do
    path="$(find "$build" -maxdepth 2 -type f -name "$name" -perm -u+x | head -n 1)"
    if [[ -n "$path" ]]; then cp "$path" "$out/b/" && found+=("$name"); fi
  done
  [[ -n "$binary_dir" || ${#found[@]} == "${#BINARIES[@]}" ]] || die "pack: built only ${found[*]}"
  strip "$out"/b/* 2>/dev/null
  # xz -1: a quarter smaller than gzip in about the same time; ZT_PACK_XZ_LEVEL=-6 halves gzip's
  # size at seven times the time (a pack near the 64 MiB a lent machine's call carries).
  tar -C "$out" -cf - b | xz -T0 "${ZT_PACK_XZ_LEVEL:--1}" >"$out/bin.tar.xz" && rm -rf "$out/b" ||
    die "pack: could not write bin.tar.xz"
  rm -f "$out/cpu_flags.txt"
  if grep -q '^ZT_NATIVE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then isa_flags >"$out/cpu_flags.txt"; fi
  cp "$script_path" "$out/gpu_check.sh"
  echo "pack: $out ($(du -sh "$out" | cut -f1)): binaries ${found[*]}; on the node: bash $out/gpu_check.sh run"
}

# ---- run: helpers -------------------------------------------------------------------------

# One row of the summary: part, pass|fail, key figures, seconds since the part began.
record() {
  local part="$1" status="$2" figures="$3"
  printf '| %s | %s | %s | %s |\n' "$part" "$status" "$figures" "$(( $(date +%s) - part_start ))" >>"$OUT/summary.md"
  [[ "$status" == pass ]] || failed=1
  echo "== $part: $status ($figures)"
}

begin() { part_start=$(date +%s); echo; echo "== [$(( part_start - t0 )) s] $*"; }

# True when every named binary is in the pack; else records PART as failed, naming the missing ones
# (a --binary-dir pack of a CPU build has no zt_gpu_tests: its GPU parts fail, never pass).
have_binaries() {
  local part="$1" name missing=""
  shift
  for name in "$@"; do [[ -x "$B/$name" ]] || missing+=" $name"; done
  [[ -z "$missing" ]] && return 0
  record "$part" fail "not in the pack:$missing"
  return 1
}

# Directories of the node's CUDA libraries: site-packages/nvidia/* (the wheels) and /usr/local/cuda.
# cuDNN 9 loads its engine and graph libraries by name at run time, so their folders are added too;
# a libcudnn.so.9 without them in reach fails only at the first fused attention.
find_cuda_libs() {
  local site dirs
  site=$(env -u LD_LIBRARY_PATH python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
  # -L: /usr/local/cuda/lib64 is a link to lib on some installs (find would not enter it).
  dirs=$(find -L ${site:+$site/nvidia} /usr/local/cuda/lib64 /usr/local/cuda/targets \
      \( -name 'libcublasLt.so.1[23]*' -o -name 'libnccl.so.2*' -o -name 'libcudart.so.1[23]*' \
      -o -name 'libcudnn*.so.9*' \) -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
  echo "$dirs"
}

# The cuDNN libraries libcudnn.so.9 needs beside it, missing from LD_LIBRARY_PATH (one a line).
missing_cudnn_parts() {
  local part dir hit cudnn
  # Beside the libcudnn.so.9 the loader picks for zerotune, or anywhere on LD_LIBRARY_PATH.
  cudnn=$(ldd "$B/zerotune" | awk '/libcudnn.so.9/ {print $3}')
  for part in libcudnn_graph libcudnn_engines_precompiled libcudnn_engines_runtime_compiled libcudnn_heuristic; do
    hit=""
    for dir in ${cudnn:+$(dirname "$cudnn")} ${LD_LIBRARY_PATH//:/ }; do [[ -e "$dir/$part.so.9" ]] && hit=1; done
    [[ -n "$hit" ]] || echo "$part.so.9"
  done
}

# Unpacks binaries, source and bundle into $W; sets B, P, the environment and the wrappers.
setup_environment() {
  B=$W/bin; P=$W/proj
  mkdir -p "$B" "$P" "$W/wrap"
  if [[ -f "$D/bin.tar.xz" ]]; then tar -C "$W" -xJf "$D/bin.tar.xz"; else tar -C "$W" -xzf "$D/bin.tar.gz"; fi &&
    cp "$W"/b/* "$B/" && tar -C "$P" -xzf "$D/bundle/zerotune-src.tar.gz" || return 1
  cp "$B/zerotune" "$D/bundle/bin/zerotune"
  bash "$D/bundle/offline_bundle.sh" unpack "$D/bundle" "$W/zt" >"$OUT/unpack.txt" 2>&1 || return 1
  # shellcheck disable=SC1091
  source "$W/zt/env.sh"
  cudalibs=$(find_cuda_libs)
  export LD_LIBRARY_PATH=${cudalibs}$LD_LIBRARY_PATH
  echo "cuda libs from: ${cudalibs:-none found}"
  # Wrappers carry the bundle's environment, so that python3 (torch) itself runs without it.
  local n
  for n in mpiexec mpirun; do
    printf '#!/bin/bash\nsource %s/zt/env.sh\nexport LD_LIBRARY_PATH=%s$LD_LIBRARY_PATH\nexec %s/zt/usr/bin/%s "$@"\n' \
      "$W" "$cudalibs" "$W" $n >"$W/wrap/$n"
  done
  printf '#!/bin/bash\nsource %s/zt/env.sh\nexport LD_LIBRARY_PATH=%s$LD_LIBRARY_PATH\nexec %s/zerotune "$@"\n' \
    "$W" "$cudalibs" "$B" >"$W/wrap/zerotune"
  chmod +x "$W"/wrap/*
}

py() { env -u LD_LIBRARY_PATH PATH="$W/wrap:$PATH" python3 "$@"; }

# ---- run: the parts -----------------------------------------------------------------------

part_env() {
  begin "environment: unpack, the node's CUDA libraries, every binary resolves its libraries"
  local flag lacking=""
  if [[ -f "$D/cpu_flags.txt" ]]; then  # a -march=native build: this CPU must have each flag
    for flag in $(cat "$D/cpu_flags.txt"); do [[ " $(isa_flags) " == *" $flag "* ]] || lacking+=" $flag"; done
    if [[ -n "$lacking" ]]; then
      record env fail "the binaries are a -march=native build; this node's CPU lacks:$lacking"
      return 1
    fi
  fi
  if ! setup_environment; then record env fail "unpack failed (see $OUT/unpack.txt)"; return 1; fi
  local gpu missing="" b cudnn
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  for b in "$B"/*; do
    ldd "$b" | grep -q 'not found' && missing+=" $(basename "$b"): $(ldd "$b" | awk '/not found/ {print $1}' | tr '\n' ' ')"
  done
  cudnn=""
  if ldd "$B/zerotune" | grep -q 'libcudnn.so.9'; then
    cudnn=$(missing_cudnn_parts | tr '\n' ' ')
    [[ -z "$cudnn" ]] || missing+=" cuDNN parts not beside libcudnn.so.9: $cudnn"
  fi
  ldd "$B"/* >"$OUT/ldd.txt" 2>&1
  if [[ -n "$missing" ]]; then record env fail "missing:$missing"; return 1; fi
  record env pass "${gpu:-no GPU visible}; $(ls "$B" | wc -l) binaries resolve every library"
}

part_cpu() {
  begin "a 2-step training run on the CPU backend (the bundle's libraries, MPI-free single rank)"
  have_binaries cpu zerotune make_bench_data || return 1
  local log=$OUT/cpu.txt loss
  {
    "$B/zerotune" init --config "$P/data/tiny-llama/config.json" --out "$W/tiny" --seed 1 &&
      "$B/make_bench_data" "$W/tiny-data" --seq 64 --samples 16 --vocab 256 &&
      timeout 120 "$B/zerotune" train --model "$W/tiny" --data "$W/tiny-data" --out "$W/cpu-run" --device cpu \
        --max-steps 2 --micro-batch-size 2 --seed 1 --log-every 1 --no-save-at-end
  } >"$log" 2>&1
  local rc=$?
  loss=$(python3 -c "import json; print(round([json.loads(l) for l in open('$W/cpu-run/metrics.jsonl')][-1]['loss'], 4))" 2>/dev/null)
  if [[ $rc == 0 && -n "$loss" ]]; then record cpu pass "2 steps, loss $loss"; else record cpu fail "rc=$rc (see $log)"; fi
}

part_tests() {
  begin "kernel and backend suites (zt_gpu_tests) on the GPU"
  have_binaries tests zt_gpu_tests || return 1
  timeout 300 "$B/zt_gpu_tests" --log_level=test_suite --report_level=short >"$OUT/gpu_tests.txt" 2>&1
  local rc=$? summary
  summary=$(grep -E "Test module .* (passed|failed|has passed|has failed)|test cases|assertions" "$OUT/gpu_tests.txt" | tail -3 | tr -s ' \n' ' ')
  if [[ $rc == 0 ]]; then record tests pass "$summary"; else record tests fail "rc=$rc $summary"; fi
}

part_selftest() {
  begin "selftest, tiny model, 1 rank"
  "$B/zerotune" init --config "$P/data/tiny-llama/config.json" --out "$W/tiny-st" --seed 1 >/dev/null 2>&1
  printf '{"train_micro_batch_size_per_gpu":2,"gradient_accumulation_steps":1,"bf16":{"enabled":true},"zero_optimization":{"stage":0}}' >"$W/tiny.json"
  timeout 120 "$B/zerotune" selftest --model "$W/tiny-st" --deepspeed "$W/tiny.json" --device cuda --seq-len 64 >"$OUT/selftest.txt" 2>&1
  local rc=$? gemm
  gemm=$(grep -i -m1 "gemm" "$OUT/selftest.txt" | tr -s ' ' | cut -c1-100)
  if [[ $rc == 0 ]]; then record selftest pass "${gemm:-every row ok}"; else record selftest fail "rc=$rc (see selftest.txt)"; fi
}

part_pytests() {
  begin "the GPU python tests (vs the CPU backend), 8 at a time"
  local f rc=0 passed failed not_run
  # Left out by default: the long multi-rank grids (zero_equivalence, memory_grid), autotune's
  # search, and selftest (the selftest part runs it). ZT_PYTESTS (a grep -E pattern of file names)
  # picks others, ZT_PYTESTS_JOBS how many run at once (8).
  (cd "$P/tests/gpu" && printf '%s\n' test_gpu_*.py |
    if [[ -n "${ZT_PYTESTS:-}" ]]; then grep -E "$ZT_PYTESTS"; else grep -v -E 'zero_equivalence|memory_grid|autotune|selftest'; fi |
    xargs -P "${ZT_PYTESTS_JOBS:-8}" -I{} sh -c 'timeout 240 env -u LD_LIBRARY_PATH PATH='"$W"'/wrap:$PATH python3 {} --zerotune '"$W"'/wrap/zerotune >'"$W"'/{}.log 2>&1; echo "{} rc=$?"') \
    >"$W/pytests-rc.txt"
  for f in "$W"/test_gpu_*.log; do echo "--- $(basename "$f")"; grep -E "FAIL|====" "$f" | tail -12; done >"$OUT/pytests.txt"
  cat "$W/pytests-rc.txt" >>"$OUT/pytests.txt"
  passed=$(grep -c 'rc=0$' "$W/pytests-rc.txt"); failed=$(grep -vc 'rc=0$' "$W/pytests-rc.txt")
  not_run=$(cat "$W"/test_gpu_*.log | grep -c "^NOT RUN")
  [[ $failed == 0 && $passed -gt 0 ]] || rc=1
  local figures
  figures="$passed passed, $failed failed ($(grep -v 'rc=0$' "$W/pytests-rc.txt" | cut -d' ' -f1 | tr '\n' ' ')), ${not_run:-0} checks NOT RUN (see pytests.txt)"
  if [[ $rc == 0 ]]; then record pytests pass "$figures"; else record pytests fail "$figures"; fi
}

part_sanitize() {
  begin "compute-sanitizer memcheck and racecheck on the kernel suites"
  have_binaries sanitize zt_gpu_tests || return 1
  command -v compute-sanitizer >/dev/null || { record sanitize fail "compute-sanitizer is not on PATH"; return 1; }
  local tool figures="" rc=0 summary
  for tool in ${ZT_SANITIZE_TOOLS:-memcheck racecheck}; do
    ZT_CUDA_CACHING_ALLOCATOR=0 timeout 400 compute-sanitizer --tool $tool --error-exitcode 9 "$B/zt_gpu_tests" \
      --run_test=${ZT_SANITIZE_TESTS:-$KERNEL_SUITES} --log_level=error >"$OUT/sanitize-$tool.txt" 2>&1 || rc=1
    summary=$(grep -m1 "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/sanitize-$tool.txt" | sed 's/^========= //')
    figures+="$tool: ${summary:-no summary (timed out?)}; "
  done
  if [[ $rc == 0 ]]; then record sanitize pass "$figures"; else record sanitize fail "$figures"; fi
}

# Tokens/s and peak memory of a run (bench/bench_results.py summarize), one JSON line appended to bench.json.
summarize_run() {
  local dir="$1" label="$2"
  py "$P/bench/bench_results.py" summarize "$dir" --label "$label" 2>/dev/null | tr -d '\n' | tee -a "$OUT/bench.json"
  echo >>"$OUT/bench.json"
}

# The bf16 GEMM peak and every hot kernel alone at the 7B shapes (each attention variant), the
# first half of bench7b without the 7B model: a minute.
part_kernels() {
  begin "GEMM peak and every hot kernel at the llama-7B shapes (bench_kernels), bf16"
  have_binaries kernels bench_gemm_peak bench_kernels || return 1
  local peak rc=0 figures
  peak=$(timeout 60 "$B/bench_gemm_peak" cuda bf16 --m 8192 --n 8192 --k 8192 2>&1 | sed -n 's/^ZT_GEMM_TFLOPS //p')
  [[ -n "$peak" ]] || rc=1
  timeout 180 "$B/bench_kernels" cuda --shape 7b --dtype bf16 --peak-tflops "${peak:-989}" --peak-gbps 3350 >"$OUT/kernels.txt" 2>&1 || rc=1
  grep -E "^attention_(forward|backward)" "$OUT/kernels.txt"
  figures="gemm peak ${peak:-?} TFLOP/s; attention fwd/bwd TFLOP/s: $(grep -E '^attention_(forward|backward)' "$OUT/kernels.txt" | awk '{printf "%s %s %s; ", $1, $2, $4}')"
  if [[ $rc == 0 ]]; then record kernels pass "$figures"; else record kernels fail "rc=$rc; $figures"; fi
}

part_bench7b() {
  begin "llama-7B shape (random weights), seq 2048, bf16: GEMM peak, kernels, zerotune LoRA vs HF+PEFT"
  have_binaries bench7b zerotune bench_gemm_peak bench_kernels make_bench_data || return 1
  local peak bs rc=0 figures
  peak=$(timeout 60 "$B/bench_gemm_peak" cuda bf16 --m 8192 --n 8192 --k 8192 2>&1 | sed -n 's/^ZT_GEMM_TFLOPS //p')
  [[ -n "$peak" ]] || rc=1
  timeout 180 "$B/bench_kernels" cuda --shape 7b --dtype bf16 --peak-tflops "${peak:-989}" --peak-gbps 3350 >"$OUT/kernels.txt" 2>&1 || rc=1
  timeout 240 "$B/zerotune" init --config "$P/bench/configs/llama-7b.json" --out "$W/m7b" --seed 1 --dtype bf16 >/dev/null 2>&1 || rc=1
  timeout 60 "$B/make_bench_data" "$W/d7b" --seq 2048 --samples 64 --vocab 32000 >/dev/null || rc=1
  figures="GEMM bf16 peak ${peak:-?} TFLOP/s"
  for bs in 1 4; do
    timeout 200 "$B/zerotune" train --model "$W/m7b" --data "$W/d7b" --out "$W/lora$bs" --deepspeed "$P/bench/configs/lora.json" \
      --micro-batch-size $bs --max-steps 8 --device cuda --seed 1 --log-every 1 --no-save-at-end --peak-tflops "${peak:-989}" \
      --lora-r 16 --lora-alpha 32 --lora-targets all-linear >"$W/lora$bs.log" 2>&1 || rc=1
    figures+="; LoRA bs$bs: $(summarize_run "$W/lora$bs" "zerotune LoRA bs$bs" | grep -o '"tokens_per_s[^,]*' | head -n 1)"
    timeout 200 env -u LD_LIBRARY_PATH python3 "$P/bench/hf_peft_step.py" --model "$W/m7b" --device cuda --dtype bf16 --seq 2048 \
      --batch $bs --steps 8 --lora-r 16 --lora-alpha 32 2>&1 | tail -n 1 | tee -a "$OUT/bench.json" >"$W/hf$bs.txt"
    figures+=", HF+PEFT: $(grep -o '"tokens_per_s[^,]*' "$W/hf$bs.txt" | head -n 1)"
  done
  if [[ $rc == 0 ]]; then record bench7b pass "$figures"; else record bench7b fail "$figures (see kernels.txt, bench.json)"; fi
}

part_opt13() {
  begin "opt-1.3b shape, full fine-tuning, fp16, micro-batch 8, seq 512, 16 steps, ZeRO-0, 3, 3 + offload (+ DPU, ratio 0.3; each offload alone)"
  have_binaries opt13 zerotune make_bench_data || return 1
  local z off extra rc=0 figures=""
  timeout 120 "$B/zerotune" init --config "$P/job_scripts/deepspeed-chat/models/opt-1.3b/config.json" --out "$W/opt" --seed 1 \
    --dtype fp16 >/dev/null 2>&1 || rc=1
  timeout 60 "$B/make_bench_data" "$W/dopt" --seq 512 --samples 256 --vocab 50272 >/dev/null || rc=1
  # DeepSpeed-Chat's fp16 section: loss_scale_window makes the scale start at 2^16 (hysteresis 2).
  # With "enabled" alone it would start at 2^32 and skip the first ~10 steps (README, fp16), so the
  # step times would be those of skipped steps (no optimizer update).
  # 3o-dpu: the same offload run with the one-step delayed update from update 3 on
  # (docs/zero-offload.md): the CPU update of step t beside step t + 1's device work; 3o-r30: the
  # same offload run with offload_optimizer.ratio 0.3 (ZeRO-Offload++: 70% of the optimizer states
  # stay on the GPU and are updated there, beside the CPU's 30%); 3o-r30-dpu: both. Two rows take a
  # part of 3o-r30-dpu away (bench/gpu_calls/2026-11-28-call9.sh found them telling): 3p, offload_param
  # alone (the optimizer on the GPU); 3r30-dpu, the optimizer offload at ratio 0.3 with DPU alone.
  local opt='"offload_optimizer":{"device":"cpu","pin_memory":true' par=',"offload_param":{"device":"cpu","pin_memory":true}'
  for z in 0 3 3o 3o-dpu 3o-r30 3o-r30-dpu 3p 3r30-dpu; do
    off="" extra=()
    local ratio=""
    [[ $z == *r30* ]] && ratio=',"ratio":0.3'
    [[ $z == 3o* ]] && off=",$opt$ratio}$par"
    [[ $z == 3p ]] && off="$par"
    [[ $z == 3r30* ]] && off=",$opt$ratio}"
    [[ $z == *-dpu ]] && extra=(--delayed-param-update 2)
    printf '{"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":1,"fp16":{"enabled":true,"loss_scale_window":100},"gradient_clipping":1.0,"optimizer":{"type":"AdamW","params":{"lr":1e-5}},"zero_optimization":{"stage":%s%s}}' \
      "${z:0:1}" "$off" >"$W/f$z.json"
    timeout 150 "$B/zerotune" train --model "$W/opt" --data "$W/dopt" --out "$W/f$z" --deepspeed "$W/f$z.json" --max-steps 16 \
      --device cuda --seed 1 --log-every 1 --no-save-at-end "${extra[@]}" >"$W/f$z.log" 2>&1 || rc=1
    cp "$W/f$z.log" "$OUT/opt13-$z.log" 2>/dev/null
    figures+="z$z: $(summarize_run "$W/f$z" "opt-1.3b fp16 z$z" | grep -o '"s_per_step[^,]*\|"tokens_per_s[^,]*' | head -n 1); "
  done
  if [[ $rc == 0 ]]; then record opt13 pass "$figures"; else record opt13 fail "$figures (see bench.json)"; fi
}

# The CPU AdamW of ZeRO-Offload against the node's memory bandwidth measured in the same run
# (bench/bench_cpu_adam.cpp: copy, triad and AdamW's own traffic without arithmetic), every core.
# ZT_ADAM_ARGS replaces its arguments (the CI test runs a small --n).
part_adam() {
  begin "the CPU AdamW (cpu_adamw) against this node's memory bandwidth, $(nproc) threads"
  have_binaries adam bench_cpu_adam || return 1
  OMP_NUM_THREADS=$(nproc) OMP_PROC_BIND=spread OMP_PLACES=cores timeout 240 "$B/bench_cpu_adam" ${ZT_ADAM_ARGS:---repeats 8} >"$OUT/adam.txt" 2>&1
  local rc=$?
  tail -n 25 "$OUT/adam.txt"
  # The bound and the offload step's rows, GB/s only: "in place 4 r + 3 w 145.8 GB/s; offload step, ..."
  if [[ $rc == 0 ]]; then record adam pass "$(grep -E '^ +(in place|offload step)' "$OUT/adam.txt" |
    sed -E 's/^ +//; s/ +[0-9.]+ ms +/ /; s/ GB\/s.*/ GB\/s/' | paste -sd ';' | sed 's/;/; /g')"
  else record adam fail "rc=$rc (see adam.txt)"; fi
}

part_prof() {
  begin "llama-7B layer shapes, 4 layers: where a LoRA step's time goes (--profile-step)"
  have_binaries prof zerotune make_bench_data || return 1
  python3 -c "import json; c=json.load(open('$P/bench/configs/llama-7b.json')); c['num_hidden_layers']=4; json.dump(c, open('$W/l4.json','w'))"
  "$B/zerotune" init --config "$W/l4.json" --out "$W/m4" --seed 1 --dtype bf16 >/dev/null 2>&1
  [[ -d "$W/d7b" ]] || "$B/make_bench_data" "$W/d7b" --seq 2048 --samples 64 --vocab 32000 >/dev/null
  timeout 120 "$B/zerotune" train --model "$W/m4" --data "$W/d7b" --out "$W/p4" --deepspeed "$P/bench/configs/lora.json" \
    --micro-batch-size 1 --max-steps 4 --device cuda --seed 1 --log-every 1 --no-save-at-end --profile-step 3 --lora-r 16 \
    --lora-alpha 32 --lora-targets all-linear >"$OUT/prof.txt" 2>&1
  local rc=$?
  if [[ $rc == 0 ]]; then record prof pass "$(grep -i -m1 attention "$OUT/prof.txt" | tr -s ' ' | cut -c1-100)"
  else record prof fail "rc=$rc (see prof.txt)"; fi
}

# ---- run ----------------------------------------------------------------------------------

run() {
  local parts="env cpu tests selftest pytests sanitize bench7b opt13 adam" part
  OUT=$PWD/gpu-results; W=/tmp/zt-gpu-check
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --out) OUT="$2"; shift 2 ;;
      --work) W="$2"; shift 2 ;;
      --parts) parts="$2"; shift 2 ;;
      *) die "run: unknown argument '$1' (run [--out RESULTS] [--work WORKDIR] [--parts \"env cpu ...\"])" ;;
    esac
  done
  D="$(dirname "$script_path")"
  [[ ( -f "$D/bin.tar.xz" || -f "$D/bin.tar.gz" ) && -d "$D/bundle" ]] ||
    die "run: $D has no bin.tar.xz and bundle/ (run it as PACKDIR/gpu_check.sh, after pack)"
  for part in $parts; do
    declare -F "part_$part" >/dev/null || die "run: unknown part '$part' (env cpu tests selftest pytests sanitize kernels bench7b opt13 adam prof)"
  done
  [[ " $parts " == *" env "* ]] || parts="env $parts"  # every other part needs the unpacked environment
  mkdir -p "$OUT" "$W" || die "run: cannot create $OUT or $W"
  OUT="$(readlink -f "$OUT")"; W="$(readlink -f "$W")"
  export PYTHONUNBUFFERED=1 ZT_PROGRESS=lines OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  exec > >(tee -a "$OUT/log.txt") 2>&1
  t0=$(date +%s); failed=0
  printf '| part | result | key figures | seconds |\n|---|---|---|---|\n' >"$OUT/summary.md"
  for part in $parts; do
    "part_$part" || [[ $part != env ]] || break  # without the environment nothing else can run
  done
  echo; echo "== summary ($OUT/summary.md), $(( $(date +%s) - t0 )) s:"; cat "$OUT/summary.md"
  return $failed
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
