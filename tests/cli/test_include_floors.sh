#!/usr/bin/env bash
# tests/cli/test_include_floors.sh: the include graph of src/ follows the floors of
# docs/architecture.md ("Floors"): a file may include headers of its own floor and of lower floors,
# never of a higher one. It reads the sources only (no build, no binary): every line
# `#include "folder/...h"` of every file under src/ (.h .hpp .cpp .cc .cu .cuh) is checked, and
# `#include <folder/...>` when folder is one of src/'s (a project header reached through -Isrc);
# other <...> includes are libraries', and an include without a folder (none exist today) is a
# header of the same directory.
#
#   floor 0  core
#   floor 1  backend (with backend/cpu, backend/cuda), data
#   floor 2  comm (with comm/mpi, comm/nccl), optim
#   floor 3  model
#   floor 4  zero
#   floor 5  ckpt, pipe
#   floor 6  train
#   floor 7  cli
#
# Rules (each offending line is listed as `FILE: #include "x/y.h"` with the rule it breaks):
#   1. floors: src/F/... may include "G/..." only when floor(G) <= floor(F). Folders on one floor
#      (backend and data; comm and optim) may include each other.
#   2. siblings: the implementation subfolders of one folder (backend/cpu and backend/cuda;
#      comm/mpi and comm/nccl) do not include each other. The folder's own files may include
#      them (backend/make_backend.cpp builds the CUDA backend), and so may higher floors (comm/nccl
#      and train/memory_model.cpp include backend/cuda's headers, which are free of CUDA headers).
#   3. emu (the emulated device, test-only, beside backend/cuda): src/emu includes only emu/
#      headers; emu/ headers are included only by src/emu and src/backend/cuda (its kernels'
#      built-ins, e.g. cuda_mma.cuh -> emu/emu_mma.h); emu/emu_internal.h and
#      emu/emu_runtime_memory.h are private to src/emu. (The build also force-includes
#      emu/emu_predefine.h into the CUDA and NCCL sources of emulated builds: that is CMake's
#      -include, not a line in a source file, and is not checked here.)
#   4. every folder under src/ and every folder an include names is in the table above: a new
#      folder fails until docs/architecture.md and this script give it a floor.
# Nothing is whitelisted: a known violation stays listed until the code is fixed.
# Usage: test_include_floors.sh [ZEROTUNE_BINARY PYTHON]   (both ignored, as every cli test gets them)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="$REPO/src"
[[ -d "$SRC" ]] || { echo "FATAL: no src/ at $SRC" >&2; exit 1; }

declare -A FLOOR=(
  [core]=0
  [backend]=1 [data]=1
  [comm]=2 [optim]=2
  [model]=3
  [zero]=4
  [ckpt]=5 [pipe]=5
  [train]=6
  [cli]=7
)
EMU_PRIVATE=" emu/emu_internal.h emu/emu_runtime_memory.h "

echo "include floors (docs/architecture.md), lowest first:"
echo "  0 core | 1 backend data | 2 comm optim | 3 model | 4 zero | 5 ckpt pipe | 6 train | 7 cli"
echo "  emu: test-only, included only by backend/cuda; includes only emu/"

violations=()
files=0
includes=0

# violation FILE INCLUDE REASON
violation() { violations+=("$1: #include $open$2$close   ($3)"); }

# Every folder under src/ must have a floor (rule 4).
for dir in "$SRC"/*/; do
  folder="$(basename "$dir")"
  [[ "$folder" == emu || -n "${FLOOR[$folder]+x}" ]] ||
    violations+=("src/$folder/: a folder with no floor (add it to docs/architecture.md and this script)")
done

while IFS= read -r -d '' path; do
  files=$((files + 1))
  rel="${path#"$REPO"/}"              # src/F[/S]/name
  inner="${rel#src/}"                 # F[/S]/name
  if [[ "$inner" != */* ]]; then
    violations+=("$rel: a file outside the floor folders (move it into one)")
    continue
  fi
  from="${inner%%/*}"                 # F
  rest="${inner#*/}"
  from_sub=""                         # S when the file is in a subfolder of F
  [[ "$rest" == */* ]] && from_sub="${rest%%/*}"
  while IFS= read -r line; do
    if [[ "$line" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
      target="${BASH_REMATCH[1]}" open='"' close='"'
      [[ "$target" == */* ]] || { includes=$((includes + 1)); continue; }  # same directory: same floor
    elif [[ "$line" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
      target="${BASH_REMATCH[1]}" open='<' close='>'
      first="${target%%/*}"
      # <core/...> through -Isrc is a project header too; anything else is a library's.
      [[ "$target" == */* && ( "$first" == emu || -n "${FLOOR[$first]+x}" ) ]] || continue
    else
      continue
    fi
    includes=$((includes + 1))
    if [[ "$target" == ../* || "$target" == ./* ]]; then
      violation "$rel" "$target" "a relative include: name the folder from src/"
      continue
    fi
    to="${target%%/*}"
    to_rest="${target#*/}"
    to_sub=""
    [[ "$to_rest" == */* ]] && to_sub="${to_rest%%/*}"

    # Rule 3: the emulated device.
    if [[ "$from" == emu || "$to" == emu ]]; then
      if [[ "$from" == emu && "$to" != emu ]]; then
        violation "$rel" "$target" "src/emu includes only emu/ headers"
      elif [[ "$from" != emu ]]; then
        if [[ "$from/$from_sub" != backend/cuda ]]; then
          violation "$rel" "$target" "only src/backend/cuda may include emu/ headers"
        elif [[ "$EMU_PRIVATE" == *" $target "* ]]; then
          violation "$rel" "$target" "$target is private to src/emu"
        fi
      fi
      continue
    fi

    # Rule 4: the included folder has a floor.
    if [[ -z "${FLOOR[$to]+x}" ]]; then
      violation "$rel" "$target" "folder $to/ has no floor"
      continue
    fi
    if [[ "$from" != emu && -z "${FLOOR[$from]+x}" ]]; then
      continue  # reported once above as a folder with no floor
    fi

    # Rule 1: no include of a higher floor.
    if (( FLOOR[$to] > FLOOR[$from] )); then
      violation "$rel" "$target" "$from (floor ${FLOOR[$from]}) includes $to (floor ${FLOOR[$to]}), a higher floor"
      continue
    fi

    # Rule 2: sibling implementation subfolders.
    if [[ "$from" == "$to" && -n "$from_sub" && -n "$to_sub" && "$from_sub" != "$to_sub" ]]; then
      violation "$rel" "$target" "$from/$from_sub and $to/$to_sub are sibling implementations"
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include' "$path" || true)
done < <(find "$SRC" -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)

echo "checked $includes #include lines of project headers in $files files under src/"
if (( files == 0 )); then
  echo "FAIL: no source files found under $SRC"
  exit 1
fi
if (( ${#violations[@]} == 0 )); then
  echo "PASS: every include goes to the same or a lower floor"
  exit 0
fi
echo "FAIL: ${#violations[@]} offence(s) against the floors:"
for v in "${violations[@]}"; do echo "  $v"; done
exit 1
