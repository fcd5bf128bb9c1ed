#!/usr/bin/env bash
# job_scripts/mpirun/train.sh: `zerotune train` launched with Open MPI's mpirun, without a batch
# system: on this machine, or on several reached over ssh through a hostfile (hostfiles/).
#
#   ZT_MODEL=/models/llama-2-7b-hf ZT_DATA=/data/rm-static ZT_OUT=/runs/sft-1 \
#   ZT_DS_CONFIG=ds_config.json ZT_HOSTFILE=hostfiles/two-nodes.txt job_scripts/mpirun/train.sh
#
# Every host of the hostfile must reach the others over ssh without a password, see the same
# paths (a shared file system, or the same copies everywhere) and have Open MPI installed.
#
# The run comes from these environment variables:
#   ZT_BIN          the zerotune executable (default: `zerotune` on PATH)
#   ZT_MODEL        HF model directory: config.json + safetensors (+ tokenizer)         [required]
#   ZT_DATA         tokenized training data, a directory written by `zerotune prep`      [required]
#   ZT_OUT          output directory: metrics.jsonl, run.json, report.html, checkpoints/ [required]
#   ZT_DS_CONFIG    DeepSpeed JSON config (batch sizes, optimizer, scheduler, ZeRO)      [optional]
#   ZT_ARGS         more `zerotune train` flags, split at spaces (no quoting)            [optional]
#   ZT_RESUME       what --resume gets: auto (default: the newest checkpoint in ZT_OUT, or a
#                   fresh start), a checkpoint directory, or "none" (no --resume)
#   ZT_HOSTFILE     Open MPI hostfile, one "host slots=N" line per node, N = GPUs of that node
#                   (default: none, every rank on this machine)
#   ZT_NP           number of ranks (default: the hostfile's slots added up; without a
#                   hostfile, the GPUs nvidia-smi lists, or 1 when there are none)
#   ZT_OMP_THREADS  OpenMP threads per rank (default: this machine's cores / ranks on it,
#                   at least 1): the CPU backend's GEMMs and the CPU Adam of optimizer offload
#   ZT_CPU_BIND     cores (default: each rank bound to ZT_OMP_THREADS cores of its own) or none
#                   (use none when ranks share cores with other jobs or oversubscribe them)
#   ZT_MPIRUN_ARGS  more mpirun options, split at spaces (e.g. "--oversubscribe",
#                   "--mca btl_tcp_if_include eth0")
#   ZT_AUTOTUNE     1: first run `zerotune autotune` with the run's options on the same ranks
#                   (ZeRO stage x offload x micro-batch x activation checkpointing, pruned by the
#                   memory model, a few steps each; results in $ZT_OUT/autotune) and train with
#                   the fastest setting; a later run on the same ZT_OUT reuses the result.
#                   0 (default): train with ZT_DS_CONFIG as it is
#   ZT_AUTOTUNE_ARGS  more `zerotune autotune` options, e.g. "--stages 2,3 --max-micro-batch 16"
#   ZT_PREFLIGHT    1: run `zerotune selftest` with the run's options on every rank first (kernels
#                   against the CPU, GEMM plans, NCCL, bandwidths, memory) and stop if it fails;
#                   0: skip it. Default: 1 on a first run, 0 when ZT_OUT already holds a
#                   checkpoint (a resubmission continuing the run: the nodes were checked before)
#
# A SIGUSR1 or SIGTERM sent to this script is passed on to every rank as SIGUSR1: zerotune then
# writes a checkpoint and exits 0; run the script again with the same ZT_OUT to continue.
set -euo pipefail

job="mpirun/train.sh"
say() { printf '[%s] %s\n' "$job" "$*"; }
die() { printf '%s: error: %s\n' "$job" "$*" >&2; exit 2; }

# ---- inputs
ZT_BIN="${ZT_BIN:-zerotune}"
command -v "$ZT_BIN" >/dev/null 2>&1 || die "ZT_BIN='$ZT_BIN': no such executable (set ZT_BIN to the zerotune binary, e.g. ZT_BIN=\$HOME/zerotune/build/zerotune)"
ZT_BIN="$(command -v "$ZT_BIN")"
[[ -n "${ZT_MODEL:-}" ]] || die "ZT_MODEL is not set: the HF model directory to fine-tune (config.json + safetensors)"
[[ -f "$ZT_MODEL/config.json" ]] || die "ZT_MODEL='$ZT_MODEL': no config.json there (an HF model directory is expected)"
[[ -n "${ZT_DATA:-}" ]] || die "ZT_DATA is not set: the tokenized data directory written by \`zerotune prep\`"
[[ -d "$ZT_DATA" ]] || die "ZT_DATA='$ZT_DATA': no such directory"
[[ -n "${ZT_OUT:-}" ]] || die "ZT_OUT is not set: the output directory (metrics, checkpoints; the same for every restart)"
if [[ -n "${ZT_DS_CONFIG:-}" && ! -f "$ZT_DS_CONFIG" ]]; then die "ZT_DS_CONFIG='$ZT_DS_CONFIG': no such file"; fi
ZT_RESUME="${ZT_RESUME:-auto}"
ZT_CPU_BIND="${ZT_CPU_BIND:-cores}"
case "$ZT_CPU_BIND" in cores|none) ;; *) die "ZT_CPU_BIND='$ZT_CPU_BIND': use cores or none" ;; esac
case "${ZT_PREFLIGHT:-}" in ""|0|1) ;; *) die "ZT_PREFLIGHT='$ZT_PREFLIGHT': use 1 (run zerotune selftest first) or 0" ;; esac
case "${ZT_AUTOTUNE:-0}" in 0|1) ;; *) die "ZT_AUTOTUNE='$ZT_AUTOTUNE': use 1 (run zerotune autotune first and train with its choice) or 0" ;; esac
command -v mpirun >/dev/null 2>&1 || die "mpirun not found: install Open MPI (Debian: openmpi-bin)"

hosts=()  # --hostfile FILE, or nothing
slots=0   # the hostfile's slots added up
first_host_slots=0
if [[ -n "${ZT_HOSTFILE:-}" ]]; then
  [[ -f "$ZT_HOSTFILE" ]] || die "ZT_HOSTFILE='$ZT_HOSTFILE': no such file"
  while read -r host rest; do
    [[ -z "$host" || "$host" == \#* ]] && continue
    n="$(sed -n 's/.*slots=\([0-9][0-9]*\).*/\1/p' <<< "$rest")"
    [[ -n "$n" ]] || die "ZT_HOSTFILE='$ZT_HOSTFILE': the line for '$host' has no slots=N (N = ranks on that host, one per GPU)"
    if [[ "$first_host_slots" -eq 0 ]]; then first_host_slots="$n"; fi
    slots=$(( slots + n ))
  done < "$ZT_HOSTFILE"
  [[ "$slots" -gt 0 ]] || die "ZT_HOSTFILE='$ZT_HOSTFILE': no hosts in it"
  hosts=(--hostfile "$ZT_HOSTFILE")
fi
if [[ -z "${ZT_NP:-}" ]]; then
  if [[ "$slots" -gt 0 ]]; then ZT_NP="$slots"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ZT_NP="$(nvidia-smi -L | wc -l)"
  else ZT_NP=1
  fi
fi
[[ "$ZT_NP" =~ ^[1-9][0-9]*$ ]] || die "ZT_NP='$ZT_NP': the number of ranks must be a positive integer"
ranks_here="$ZT_NP"
if [[ "$first_host_slots" -gt 0 && "$first_host_slots" -lt "$ZT_NP" ]]; then ranks_here="$first_host_slots"; fi
if [[ -z "${ZT_OMP_THREADS:-}" ]]; then
  ZT_OMP_THREADS=$(( $(nproc) / ranks_here ))
  if [[ "$ZT_OMP_THREADS" -lt 1 ]]; then ZT_OMP_THREADS=1; fi
fi
[[ "$ZT_OMP_THREADS" =~ ^[1-9][0-9]*$ ]] || die "ZT_OMP_THREADS='$ZT_OMP_THREADS': must be a positive integer"
mkdir -p "$ZT_OUT" || die "ZT_OUT='$ZT_OUT': cannot create it"

# ---- the ranks' environment (-x hands each variable to ranks on other hosts)
export OMP_NUM_THREADS="$ZT_OMP_THREADS"
# NCCL_SOCKET_IFNAME: the interface NCCL's bootstrap (and its socket transport) uses. NCCL picks
#   one; set it when hosts have several and NCCL picks one the others cannot reach (the job
#   hangs at the first collective): e.g. "ib0", "eth0", or "^docker0,lo" to exclude some.
# NCCL_IB_HCA: which InfiniBand adapters NCCL uses (e.g. "mlx5_0,mlx5_1"); set it when some
#   adapters are not on the compute fabric.
# NCCL_DEBUG: WARN prints only problems; INFO shows the transports NCCL chose (for a slow or
#   hanging multi-node job).
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
# Plain step lines, no progress bar, when this script's output goes to a log: ranks cannot
# tell (under mpirun every rank's stdout is a pseudo-terminal, whatever mpirun's is).
if [[ ! -t 1 ]]; then export ZT_PROGRESS="${ZT_PROGRESS:-lines}"; fi
forward=(-x OMP_NUM_THREADS -x NCCL_DEBUG)
for name in NCCL_SOCKET_IFNAME NCCL_IB_HCA ZT_PROGRESS; do
  if [[ -n "${!name:-}" ]]; then export "${name?}"; forward+=(-x "$name"); fi
done

# ---- the command
train=("$ZT_BIN" train --model "$ZT_MODEL" --data "$ZT_DATA" --out "$ZT_OUT")
if [[ -n "${ZT_DS_CONFIG:-}" ]]; then train+=(--deepspeed "$ZT_DS_CONFIG"); fi
if [[ "$ZT_RESUME" != "none" ]]; then train+=(--resume "$ZT_RESUME"); fi
read -r -a extra_args <<< "${ZT_ARGS:-}"
train+=("${extra_args[@]}")
bind=(--map-by "slot:PE=$OMP_NUM_THREADS" --bind-to core)
if [[ "$ZT_CPU_BIND" == "none" ]]; then bind=(--bind-to none); fi
read -r -a mpirun_args <<< "${ZT_MPIRUN_ARGS:-}"
launcher=(mpirun -np "$ZT_NP" "${hosts[@]}" "${bind[@]}" "${forward[@]}" "${mpirun_args[@]}")
launch=("${launcher[@]}" "${train[@]}")

# ---- ZT_AUTOTUNE=1: `zerotune autotune` on the same ranks first (once: its result in
# $ZT_OUT/autotune is reused by later runs of the job), then `train` with the fastest setting:
# its DeepSpeed JSON, and --activation-checkpointing when that was faster.
if [[ "${ZT_AUTOTUNE:-0}" == "1" ]]; then
  tuned="$ZT_OUT/autotune/autotuning_results"
  if [[ ! -f "$tuned/ds_config_optimal.json" ]]; then
    autotune=("$ZT_BIN" autotune --model "$ZT_MODEL" --data "$ZT_DATA" --out "$ZT_OUT/autotune")
    if [[ -n "${ZT_DS_CONFIG:-}" ]]; then autotune+=(--deepspeed "$ZT_DS_CONFIG"); fi
    read -r -a autotune_args <<< "${ZT_AUTOTUNE_ARGS:-}"
    autotune+=("${extra_args[@]}" "${autotune_args[@]}")
    say "autotune: + ${launcher[*]} ${autotune[*]}"
    "${launcher[@]}" "${autotune[@]}" || die "zerotune autotune failed (the lines above say why): not training"
  fi
  read -r -a tuned_flags < "$tuned/flags_optimal.txt" || true
  train=("$ZT_BIN" train --model "$ZT_MODEL" --data "$ZT_DATA" --out "$ZT_OUT" --deepspeed "$tuned/ds_config_optimal.json")
  if [[ "$ZT_RESUME" != "none" ]]; then train+=(--resume "$ZT_RESUME"); fi
  train+=("${extra_args[@]}" "${tuned_flags[@]}")
  launch=("${launcher[@]}" "${train[@]}")
  say "autotune: training with $tuned/ds_config_optimal.json ${tuned_flags[*]}"
fi

# ---- preflight: the nodes checked with the run's own options before a first run
if [[ -z "${ZT_PREFLIGHT:-}" ]]; then
  if [[ -f "$ZT_OUT/checkpoints/latest" ]]; then ZT_PREFLIGHT=0; else ZT_PREFLIGHT=1; fi
fi
if [[ "$ZT_PREFLIGHT" == "1" ]]; then
  preflight=("${launcher[@]}" "$ZT_BIN" selftest "${train[@]:2}")
  say "preflight: + ${preflight[*]}"
  if ! "${preflight[@]}"; then
    say "preflight failed (the lines above name the check, rank and host): not training; fix the node or set ZT_PREFLIGHT=0"
    exit 1
  fi
fi


say "$ZT_NP ranks${ZT_HOSTFILE:+ on the hosts of $ZT_HOSTFILE}, $OMP_NUM_THREADS OpenMP threads each"
say "+ ${launch[*]}"

# ---- run, passing SIGUSR1/SIGTERM on to the ranks (mpirun forwards SIGUSR1 to every rank;
# a SIGTERM to mpirun itself would kill them without a checkpoint)
launcher_pid=""
# shellcheck disable=SC2317  # called by the traps below
forward_signal() {
  say "received SIG$1: asking zerotune to write a checkpoint and stop"
  if [[ -n "$launcher_pid" ]]; then kill -USR1 "$launcher_pid" 2>/dev/null || true; fi
}
trap 'forward_signal USR1' USR1
trap 'forward_signal TERM' TERM
"${launch[@]}" &
launcher_pid=$!
# A trapped signal ends `wait` early (status > 128): wait again until mpirun is gone.
status=0
while true; do
  if wait "$launcher_pid"; then status=0; else status=$?; fi
  kill -0 "$launcher_pid" 2>/dev/null || break
done
say "mpirun exited with status $status"
exit "$status"
