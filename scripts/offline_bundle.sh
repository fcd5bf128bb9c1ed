#!/usr/bin/env bash
# scripts/offline_bundle.sh: the "offline cluster bundle" for air-gapped GPU nodes. On a Debian
# machine with apt (and network) `pack` collects the Debian packages the zerotune binary needs at
# run time (found from `ldd` of the binary and `dpkg -S`, with their dependency closure, plus
# Open MPI's launcher), the packages a build needs, the binary, and the source tree. On the node
# `unpack` extracts every .deb into a prefix with `dpkg -x` (no root, no apt) and writes
# PREFIX/env.sh (PATH, LD_LIBRARY_PATH, OPAL_PREFIX for the relocated Open MPI, ...), and
# `build` compiles zerotune there with cmake (and nvcc when the node has it) against those libs.
#
#   scripts/offline_bundle.sh pack OUTDIR [--binary build/zerotune] [--no-build-deps] [--with-base]
#   scripts/offline_bundle.sh unpack BUNDLE PREFIX
#   scripts/offline_bundle.sh build PREFIX [--source DIR] [--cuda-arch 90] [--jobs N]
#
# The node should run the same Debian release as the packing machine (Debian 12 here). Not
# bundled: the C/C++ runtime and toolchain (libc6, libstdc++6, gcc, ...: a build on the node uses
# its own compilers and nvcc) and the base system (Priority required/important; --with-base
# bundles those too). Libraries that no package owns (the CUDA runtime and cuBLASLt from
# /usr/local/cuda) are copied as files; the GPU driver must be installed on the node.
set -euo pipefail

script_path="$(readlink -f "${BASH_SOURCE[0]}")"
repo_root="$(cd "$(dirname "$script_path")/.." && pwd)"

die() {
  echo "offline_bundle.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,20p' "$script_path" | sed 's/^# \{0,1\}//'
  exit 2
}

multiarch() {
  dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null ||
    echo "$(uname -m)-linux-gnu"
}

# The places dpkg may have registered a library path under: the path, its target, and both with
# and without the /usr prefix (usrmerge registers /usr/lib, ldd may print /lib).
owner_candidates() {
  local path="$1" real
  real="$(readlink -f "$path")"
  printf '%s\n' "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"
}

# path -> the Debian package owning it, for every candidate of the given libraries, from one
# `dpkg -S` call (one per path took 0.13 s each, about 18 s of a pack).
declare -A path_owner=()
index_owners() {
  local line path
  while IFS= read -r line; do
    [[ "$line" == diversion* ]] && continue
    path="${line#*: }"
    [[ -n "${path_owner[$path]+x}" ]] || path_owner[$path]="${line%%:*}"
  done < <(for lib in "$@"; do owner_candidates "$lib"; done | sort -u | xargs -r dpkg -S 2>/dev/null || true)
}

# The Debian package that owns a library path ("" when none), the first candidate that has one
# (index_owners first).
owner_package() {
  local candidate
  while IFS= read -r candidate; do
    if [[ -n "${path_owner[$candidate]+x}" ]]; then
      echo "${path_owner[$candidate]}"
      return
    fi
  done < <(owner_candidates "$1")
}

# Packages the node is expected to have: the C/C++ runtime and toolchain (a build there uses
# the node's compilers and nvcc) and scripting languages. Bundling libc6 would even break the
# binary on a node whose loader differs.
node_provided='^(libc6|libc6-dev|libc-dev-bin|libcrypt-dev|libnsl-dev|libtirpc-dev|linux-libc-dev|rpcsvc-proto'
node_provided+='|libgcc-s1|libstdc\+\+6|lib(gcc|stdc\+\+|gfortran|objc)-[0-9]+-dev|(gcc|g\+\+|cpp|gfortran)(-[0-9]+)?(-base)?'
node_provided+='|flang-.*|libflang-.*|llvm.*|libllvm.*|clang.*|libclang.*|libmlir.*|binutils.*|libbinutils|libctf.*'
node_provided+='|libgprofng.*|libasan.*|liblsan.*|libtsan.*|libubsan.*|libhwasan.*|libitm.*|libcc1.*|libisl.*|libmpc.*|libmpfr.*'
node_provided+='|perl|perl-modules-.*|libperl.*|python3.*|libpython3.*)$'

# Reads `apt-cache depends` output (no recommends/suggests) of packages on stdin and prints the
# dependencies apt would pick: the first of each "a | b" group, the first provider of a virtual.
pick_dependencies() {
  awk '
    /^[^ ]/ { open_group = 0; want_provider = 0; next }
    /^ [ |](Pre)?Depends: / {
      entry = $2
      alternative = substr($0, 2, 1) == "|"
      if (!open_group) {
        if (entry ~ /^</) { want_provider = 1 } else { print entry; want_provider = 0 }
      } else { want_provider = 0 }
      open_group = alternative
      next
    }
    /^    [^ ]/ { if (want_provider) { print $1; want_provider = 0 } }
  '
}

# Prints the dependency closure of the given packages, breadth first, one apt-cache call per
# level, without expanding node-provided packages or the base system (Priority required or
# important) unless with_base=1. Left-out names go to the file $left_out.
dependency_closure() {
  local -A seen=()
  local frontier=("$@") next name priority
  while [[ ${#frontier[@]} -gt 0 ]]; do
    next=()
    # Priorities of this level in one call: "name priority" lines.
    while read -r name priority; do
      [[ -n "$name" && -z "${seen[$name]+x}" ]] || continue
      seen[$name]=1
      if [[ "$name" =~ $node_provided ]] ||
         [[ $with_base == 0 && ( "$priority" == required || "$priority" == important ) ]]; then
        echo "$name" >>"$left_out"
      else
        echo "$name"
        next+=("$name")
      fi
    done < <(apt-cache show --no-all-versions "${frontier[@]}" 2>/dev/null |
             awk '/^Package: / {name = $2} /^Priority: / {print name, $2}')
    [[ ${#next[@]} -gt 0 ]] || break
    mapfile -t frontier < <(apt-cache depends --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${next[@]}" | pick_dependencies | grep -v ':' | sort -u)
    local unseen=()
    for name in "${frontier[@]}"; do [[ -n "${seen[$name]+x}" ]] || unseen+=("$name"); done
    frontier=("${unseen[@]}")
  done
}

# ---- pack ---------------------------------------------------------------------------------

pack() {
  local out="" binary="$repo_root/build/zerotune" build_deps=1 with_base=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --binary) binary="$2"; shift 2 ;;
      --no-build-deps) build_deps=0; shift ;;
      --with-base) with_base=1; shift ;;
      -*) die "pack: unknown option $1" ;;
      *) [[ -z "$out" ]] || die "pack: one OUTDIR only"; out="$1"; shift ;;
    esac
  done
  [[ -n "$out" ]] || usage
  [[ -x "$binary" ]] || die "pack: no zerotune binary at $binary (build first, or pass --binary)"
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    die "pack: needs apt-get and dpkg (a Debian machine)"
  fi
  mkdir -p "$out/debs" "$out/extra-libs" "$out/bin"
  out="$(cd "$out" && pwd)"

  # 1. The shared libraries the binary loads, and who owns them.
  local ldd_output missing seeds=() extra=() lib owner
  ldd_output="$(ldd "$binary")" || die "pack: ldd $binary failed"
  missing="$(grep 'not found' <<<"$ldd_output" || true)"
  [[ -z "$missing" ]] || die "pack: $binary has unresolved libraries:"$'\n'"$missing"
  local libs
  mapfile -t libs < <(awk '/=> \// {print $3}' <<<"$ldd_output" | sort -u)
  index_owners "${libs[@]}"
  while read -r lib; do
    owner="$(owner_package "$lib")"
    if [[ -n "$owner" ]]; then
      seeds+=("$owner")
    else
      extra+=("$lib")
    fi
  done < <(awk '/=> \// {print $3}' <<<"$ldd_output" | sort -u)
  # 2. Open MPI's launcher (mpirun, orted, its plugins' dependencies) is not linked but needed
  #    to run ranks; the build packages are what CMakeLists.txt's find_package calls look for.
  seeds+=(openmpi-bin openmpi-common)
  if [[ $build_deps == 1 ]]; then
    seeds+=(cmake pkgconf libopenmpi-dev libhdf5-dev libboost-program-options-dev libboost-test-dev libboost-context-dev
            libopenblas-openmp-dev libsentencepiece-dev libpcre2-dev libicu-dev nlohmann-json3-dev
            libprotobuf-dev protobuf-compiler)
  fi
  mapfile -t seeds < <(printf '%s\n' "${seeds[@]}" | sort -u)
  echo "pack: ${#seeds[@]} seed packages: ${seeds[*]}"

  # 3. Their dependency closure, minus what the node provides.
  local packages=() skipped=() name left_out
  left_out="$(mktemp)"
  mapfile -t packages < <(dependency_closure "${seeds[@]}" | sort -u)
  mapfile -t skipped < <(sort -u "$left_out")
  rm -f "$left_out"
  echo "pack: downloading ${#packages[@]} packages (left out, the node provides them: ${skipped[*]})"
  (cd "$out/debs" && apt-get download "${packages[@]}") || die "pack: apt-get download failed"

  # 4. Unowned libraries (CUDA runtime, cuBLASLt) as files, the binary, the source tree.
  for lib in "${extra[@]}"; do
    cp -L "$lib" "$out/extra-libs/$(basename "$lib")"
    echo "pack: $lib is in no Debian package: copied as a file"
  done
  cp -L "$binary" "$out/bin/zerotune"
  cp "$script_path" "$out/offline_bundle.sh"
  (cd "$repo_root" && git ls-files -z --cached --others --exclude-standard |
     tar --null -T - -czf "$out/zerotune-src.tar.gz") || die "pack: cannot archive $repo_root"
  {
    echo "multiarch $(multiarch)"
    echo "source $(cd "$repo_root" && git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"')"
    apt-cache show --no-all-versions "${packages[@]}" |
      awk '/^Package: / {name = $2} /^Version: / {print "package", name, $2}'
    for name in "${skipped[@]}"; do echo "node-provided $name"; done
    for lib in "${extra[@]}"; do echo "extra-lib $(basename "$lib")"; done
  } >"$out/MANIFEST"
  echo "pack: bundle in $out ($(du -sh "$out" | cut -f1)); on the node: bash $out/offline_bundle.sh unpack $out PREFIX"
}

# ---- unpack -------------------------------------------------------------------------------

# Extracts one .deb into a directory: dpkg-deb when the node has it, else ar + tar.
extract_deb() {
  local deb="$1" prefix="$2" work members
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$prefix"
    return
  fi
  command -v ar >/dev/null || die "unpack: needs dpkg-deb or ar to extract $deb"
  work="$(mktemp -d)"
  (cd "$work" && ar x "$deb")
  members=("$work"/data.tar.*)
  tar -xf "${members[0]}" -C "$prefix"
  rm -rf "$work"
}

unpack() {
  [[ $# -eq 2 ]] || usage
  local bundle prefix triplet deb count=0 link target
  bundle="$(cd "$1" && pwd)" || die "unpack: no bundle directory $1"
  [[ -f "$bundle/MANIFEST" ]] || die "unpack: $bundle/MANIFEST is missing (not a bundle made by pack)"
  mkdir -p "$2"
  prefix="$(cd "$2" && pwd)"
  triplet="$(sed -n 's/^multiarch //p' "$bundle/MANIFEST")"
  for deb in "$bundle"/debs/*.deb; do
    extract_deb "$deb" "$prefix"
    count=$((count + 1))
  done
  echo "unpack: extracted $count packages into $prefix"
  # Absolute symlinks inside the packages point at the node's /usr: point them into the prefix
  # (relative links, so the prefix can move).
  while IFS= read -r -d '' link; do
    target="$(readlink "$link")"
    if [[ "$target" == /* && -e "$prefix$target" ]]; then
      ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$prefix$target")" "$link"
    fi
  done < <(find "$prefix" -type l -print0)
  # Links that Debian's alternatives system and ldconfig make at install time (dpkg -x does
  # not): the launchers' plain names, and a soname link for every versioned library kept
  # outside the standard directories (e.g. libpsm_infinipath.so.1 in usr/lib/libpsm1).
  make_soname_links "$prefix" "$triplet"
  local alternative
  for alternative in "$prefix"/usr/bin/*.openmpi; do
    [[ -e "$alternative" ]] || continue
    link="${alternative%.openmpi}"
    [[ -e "$link" ]] || ln -s "$(basename "$alternative")" "$link"
  done
  mkdir -p "$prefix/bin" "$prefix/lib/zerotune-extra" "$prefix/src/zerotune"
  cp -a "$bundle"/extra-libs/. "$prefix/lib/zerotune-extra/"
  cp "$bundle/bin/zerotune" "$prefix/bin/zerotune"
  cp "$bundle/offline_bundle.sh" "$prefix/offline_bundle.sh"
  tar -xzf "$bundle/zerotune-src.tar.gz" -C "$prefix/src/zerotune"
  write_env "$prefix" "$triplet"
  echo "unpack: done; run with: source $prefix/env.sh && zerotune --help"
}

# PREFIX/lib/zerotune-sonames/SONAME -> the library, for versioned libraries (lib*.so.N...)
# outside the standard library directories whose soname no standard directory has.
make_soname_links() {
  local prefix="$1" triplet="$2" library soname standard
  mkdir -p "$prefix/lib/zerotune-sonames"
  while IFS= read -r -d '' library; do
    case "$library" in "$prefix/usr/lib/$triplet/"lib*.so.* | "$prefix/lib/$triplet/"lib*.so.*)
      [[ "$(dirname "$library")" == "$prefix/usr/lib/$triplet" || "$(dirname "$library")" == "$prefix/lib/$triplet" ]] && continue ;;
    esac
    soname="$(readelf -d "$library" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
    [[ -n "$soname" ]] || soname="$(basename "$library" | sed -E 's/(\.so\.[0-9]+).*/\1/')"
    for standard in "$prefix/usr/lib/$triplet" "$prefix/lib/$triplet" "$prefix/lib/zerotune-sonames"; do
      [[ -e "$standard/$soname" ]] && continue 2
    done
    ln -s "$(realpath --relative-to="$prefix/lib/zerotune-sonames" "$library")" \
      "$prefix/lib/zerotune-sonames/$soname"
  done < <(find "$prefix/usr/lib" "$prefix/lib" -name 'lib*.so.*' -type f -print0 2>/dev/null)
}

# PREFIX/env.sh: computes its own location when sourced, so the prefix can be moved or mounted
# elsewhere. With `env -i` (an empty environment) it still gives a working setup.
write_env() {
  local prefix="$1" triplet="$2"
  cat >"$prefix/env.sh" <<EOF
# zerotune offline bundle: source this (bash) to run or build zerotune from this prefix.
ZT_PREFIX="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
export ZT_PREFIX
export ZT_MULTIARCH="$triplet"
_zt_lib="\$ZT_PREFIX/usr/lib/$triplet"
export PATH="\$ZT_PREFIX/bin:\$ZT_PREFIX/usr/bin:\${PATH:-/usr/local/bin:/usr/bin:/bin}"
# Libraries: /usr/lib and /lib (Debian 12 still ships some in /lib), OpenBLAS's OpenMP build,
# Open MPI, HDF5, the soname links unpack made, and the files no package owns (CUDA runtime).
export LD_LIBRARY_PATH="\$_zt_lib:\$ZT_PREFIX/lib/$triplet:\$_zt_lib/openblas-openmp:\$_zt_lib/openmpi/lib:\$_zt_lib/hdf5/serial:\$ZT_PREFIX/lib/zerotune-sonames:\$ZT_PREFIX/lib/zerotune-extra\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
# Open MPI and PMIx were built for /usr: these relocate them (libraries, plugins, help files,
# configuration) into the prefix. Remote nodes need the same prefix at the same path.
export OPAL_PREFIX="\$ZT_PREFIX/usr"
export OPAL_SYSCONFDIR="\$ZT_PREFIX/etc/openmpi"
export PMIX_PREFIX="\$_zt_lib/pmix2"
export PMIX_EXEC_PREFIX="\$_zt_lib/pmix2"
export PMIX_LIBDIR="\$_zt_lib/pmix2/lib"
export PMIX_DATADIR="\$_zt_lib/pmix2/share"
export HWLOC_PLUGINS_PATH="\$_zt_lib/hwloc"
# For builds: CMake and pkg-config look in the prefix (pkg-config's paths get the prefix
# prepended, since the .pc files say /usr).
export CMAKE_PREFIX_PATH="\$ZT_PREFIX/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_LIBDIR="\$_zt_lib/pkgconfig:\$ZT_PREFIX/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="\$ZT_PREFIX"
unset _zt_lib
EOF
}

# ---- build --------------------------------------------------------------------------------

build() {
  local prefix="" source="" arch="" jobs=2
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --source) source="$2"; shift 2 ;;
      --cuda-arch) arch="$2"; shift 2 ;;
      --jobs) jobs="$2"; shift 2 ;;
      -*) die "build: unknown option $1" ;;
      *) [[ -z "$prefix" ]] || die "build: one PREFIX only"; prefix="$1"; shift ;;
    esac
  done
  [[ -n "$prefix" && -f "$prefix/env.sh" ]] || die "build: $prefix/env.sh is missing (run unpack first)"
  prefix="$(cd "$prefix" && pwd)"
  source="${source:-$prefix/src/zerotune}"
  # shellcheck disable=SC1091
  source "$prefix/env.sh"
  local triplet="$ZT_MULTIARCH" lib cmake_args=()
  lib="$prefix/usr/lib/$triplet"
  # Debian picks these through alternatives links, which dpkg -x does not make: name them.
  cmake_args+=(-DOPENBLAS_INCLUDE_DIR="$prefix/usr/include/$triplet/openblas-openmp"
               -DOPENBLAS_LIBRARY="$lib/openblas-openmp/libopenblas.so"
               -DMPI_C_COMPILER="$prefix/usr/bin/mpicc.openmpi"
               -DHDF5_C_INCLUDE_DIR="$prefix/usr/include/hdf5/serial"
               -DHDF5_C_LIBRARY_hdf5="$lib/hdf5/serial/libhdf5.so"
               -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf"
               -DZT_NATIVE=OFF)
  [[ -z "$arch" ]] || cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES="$arch")
  local cmake="$prefix/usr/bin/cmake"
  [[ -x "$cmake" ]] || cmake="$(command -v cmake)" || die "build: no cmake in the prefix or on PATH"
  "$cmake" -S "$source" -B "$prefix/build" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
  "$cmake" --build "$prefix/build" -j "$jobs" --target zerotune
  cp "$prefix/build/zerotune" "$prefix/bin/zerotune"
  echo "build: $prefix/bin/zerotune rebuilt from $source"
}

[[ $# -ge 1 ]] || usage
command="$1"
shift
case "$command" in
  pack) pack "$@" ;;
  unpack) unpack "$@" ;;
  build) build "$@" ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$command' (pack, unpack or build)" ;;
esac
