#!/usr/bin/env bash
# Bundles the fp8sim binary and the GPU test binaries, with the non-glibc shared libraries they
# need (fmt, Boost.Program_options, HDF5, gomp, and their dependencies, found with ldd), into
# .bundle/ (gitignored), for a GPU host that has the CUDA driver and cuBLASLt but none of the
# development packages. It also writes .bundle.tar.xz (gitignored), the same files compressed: that
# is what travels to the GPU host (carry it and start with `tar -xJf .bundle.tar.xz`), since the
# working tree and the carried paths together must stay under 64 MiB. The script fails when the
# archive is over 32 MB.
#
# Usage:  scripts/package_gpu.sh [BUILD_DIR]        (default: build-gpu, else build)
#
# Layout (what scripts/device/run_all.sh and the area scripts expect):
#   .bundle/fp8sim             the binary (RUNPATH $ORIGIN/lib: finds lib/ by itself)
#   .bundle/tests.tar.xz       the GPU test binaries, compressed (unpacked into .bundle/tests/ by `run`
#                              or scripts/device/gpu.sh; they need LD_LIBRARY_PATH=.bundle/lib, or `run`)
#   .bundle/lib/               the bundled shared libraries, fp8sim's GPU module (libfp8sim_gpu.so) and MPI module (libfp8sim_mpi.so)
#   .bundle/run PROG ARGS...   runs PROG (a path, or a name under the bundle) with LD_LIBRARY_PATH =
#                              lib/ + the directory of the host's cuBLASLt when the loader lacks it
#   .bundle/peers/             optional: COAT's sdist for scripts/bench_peers.py --coat (never
#                              part of the project; copied from $FP8SIM_COAT_SDIST if set)
#   .bundle/MANIFEST           git revision, build directory, files and sizes
# cuBLASLt (about 540 MB) is NOT bundled: the GPU host's CUDA / PyTorch installation provides it;
# `run` looks for libcublasLt.so.13 in the usual places (see the script it writes).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-}
if [[ -z "$build" ]]; then
  if [[ -x "$root/build-gpu/fp8sim" ]]; then build=$root/build-gpu; else build=$root/build; fi
fi
build=$(cd "$build" && pwd)
[[ -x "$build/fp8sim" ]] || { echo "package_gpu.sh: error: no fp8sim binary in '$build' (build it first)" >&2; exit 1; }

limit_mb=32  # the archive's; the tracked tree is ~27 MB of the 64 MiB that travel
out=$root/.bundle
tmp=$(mktemp -d "$root/.bundle.tmp.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tests" "$tmp/lib"

bins=("$build/fp8sim")
# The GPU module the binary opens on demand (it looks in lib/ beside itself).
[[ -f "$build/libfp8sim_gpu.so" ]] && bins+=("$build/libfp8sim_gpu.so")
# The MPI module (loaded only under mpirun/srun) goes without its MPI libraries: a job's ranks must
# use the host's own MPI, the one its launcher belongs to.
[[ -f "$build/libfp8sim_mpi.so" ]] && cp "$build/libfp8sim_mpi.so" "$tmp/lib/" && strip --strip-unneeded "$tmp/lib/libfp8sim_mpi.so"
while IFS= read -r t; do bins+=("$t"); done < <(find "$build/tests" -maxdepth 1 -type f -name 'test_*_gpu' -perm -u+x 2>/dev/null | sort)
if ! compgen -G "$build/tests/test_*_gpu" > /dev/null; then
  echo "package_gpu.sh: warning: no tests/test_*_gpu binaries in '$build' (build them to bundle the GPU tests)" >&2
fi

# glibc and its satellites come from the host (newer there; mixing loaders breaks); so do the
# C++ runtime (every host with CUDA has one at least as new) and the CUDA libraries (driver,
# cuBLASLt) that must match the host's driver.
skip_re='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnvidia-[a-z-]+)\.so'

for b in "${bins[@]}"; do
  name=$(basename "$b")
  dest="$tmp/tests/$name"
  [[ "$name" == fp8sim ]] && dest="$tmp/fp8sim"
  [[ "$name" == libfp8sim_gpu.so ]] && dest="$tmp/lib/$name"
  cp "$b" "$dest"
  strip --strip-unneeded "$dest" 2>/dev/null || true
  # Every resolved dependency (ldd lists transitive ones too).
  while read -r lib; do
    base=$(basename "$lib")
    if [[ "$base" =~ $skip_re ]]; then continue; fi
    [[ -e "$tmp/lib/$base" ]] || cp -L "$lib" "$tmp/lib/$base"
  done < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
  if ldd "$b" | grep -q "not found"; then
    missing=$(ldd "$b" | grep "not found" | awk '{print $1}' | grep -Ev "$skip_re" || true)
    if [[ -n "$missing" ]]; then
      echo "package_gpu.sh: error: $name needs libraries this machine cannot resolve: $missing" >&2
      exit 1
    fi
  fi
done
strip --strip-unneeded "$tmp"/lib/*.so* 2>/dev/null || true

# The test binaries each carry the kernels' fat binaries (~40 MB together): ship them xz-compressed
# (~3x smaller); `run` and scripts/device/gpu.sh unpack them into tests/ on first use.
if compgen -G "$tmp/tests/*" > /dev/null; then
  # -9 (64 MiB dictionary) in one thread: the binaries share most of their bytes (the same
  # statically linked kernels), which only a window spanning several of them removes.
  tar -C "$tmp" -cf - tests | xz -T1 -9 > "$tmp/tests.tar.xz"
  rm -rf "$tmp/tests"
fi

cat > "$tmp/run" <<'RUN'
#!/usr/bin/env bash
# Runs a bundled program with the bundled libraries first, then the host's cuBLASLt if the loader
# does not already know it. PROG is a path, or a name: fp8sim, test_cast_gpu, ...
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -lt 1 ]]; then echo "usage: $0 PROG [ARGS...]   (PROG: fp8sim, $(ls "$here/tests" | tr '\n' ' '))" >&2; exit 2; fi
prog=$1; shift
if [[ ! -d "$here/tests" && -f "$here/tests.tar.xz" ]]; then tar -C "$here" -xJf "$here/tests.tar.xz"; fi
if [[ "$prog" != */* ]]; then
  if [[ "$prog" == fp8sim ]]; then prog=$here/fp8sim; else prog=$here/tests/$prog; fi
fi
[[ -x "$prog" ]] || { echo "run: error: no program '$prog'" >&2; exit 2; }
cublas_dir=${FP8SIM_CUBLAS_DIR:-}
if [[ -z "$cublas_dir" ]] && ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13 '; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64; do
    if [[ -e "$d/libcublasLt.so.13" ]]; then cublas_dir=$d; break; fi
  done
  if [[ -z "$cublas_dir" ]] && command -v python3 >/dev/null; then
    # PyTorch's wheels carry cuBLAS under nvidia/{cu13,cublas}/lib.
    cublas_dir=$(python3 - <<'PY' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for r in roots:
    for pat in ("nvidia/cu13/lib/libcublasLt.so.13", "nvidia/cublas/lib/libcublasLt.so.13"):
        hits = glob.glob(os.path.join(r, pat))
        if hits:
            print(os.path.dirname(hits[0])); raise SystemExit
PY
)
  fi
fi
export LD_LIBRARY_PATH="$here/lib${cublas_dir:+:$cublas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$prog" "$@"
RUN
chmod +x "$tmp/run"

if [[ -n "${FP8SIM_COAT_SDIST:-}" && -f "$FP8SIM_COAT_SDIST" ]]; then
  mkdir -p "$tmp/peers"
  cp "$FP8SIM_COAT_SDIST" "$tmp/peers/"
fi

{
  echo "fp8sim GPU bundle"
  echo "created: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "build: $build"
  echo "files:"
  (cd "$tmp" && find . -type f ! -name MANIFEST -printf '%s\t%p\n' | sort -k2)
} > "$tmp/MANIFEST"

# The archive that travels: .bundle/ as a tree (paths start with .bundle/).
archive=$root/.bundle.tar.xz
mkdir -p "$tmp.stage" && mv "$tmp" "$tmp.stage/.bundle"
trap 'rm -rf "$tmp.stage" "$archive.tmp"' EXIT
tar -C "$tmp.stage" -cf - .bundle | xz -T0 -9 > "$archive.tmp"
size_kb=$(du -sk "$archive.tmp" | cut -f1)
if (( size_kb > limit_mb * 1024 )); then
  echo "package_gpu.sh: error: the archive is $((size_kb / 1024)) MB, over the ${limit_mb} MB limit" >&2
  exit 1
fi
rm -rf "$out"
mv "$tmp.stage/.bundle" "$out"
mv "$archive.tmp" "$archive"
rm -rf "$tmp.stage"
trap - EXIT
echo "package_gpu.sh: wrote $out (${#bins[@]} binaries, $(ls "$out/lib" | wc -l) libraries) and $archive ($((size_kb / 1024)) MB)"
echo "package_gpu.sh: on the GPU host, with .bundle.tar.xz carried: 'tar -xJf .bundle.tar.xz' recreates $(basename "$out")/"
echo "package_gpu.sh: the test binaries are in $out/tests.tar.xz: 'tar -C $out -xJf $out/tests.tar.xz' (or '$out/run NAME') unpacks them"
