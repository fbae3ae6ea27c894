#!/usr/bin/env bash
# GEMM libraries side by side at configs/bench-dsv3.json's shapes (docs/kernels.md "BLAS choice"):
# OpenBLAS (Debian), oneDNN 2.6 (Debian, moet's today), oneDNN 3.2 (PyPI onednn-cpu-gomp: GNU
# OpenMP), Intel MKL 2026.2 (PyPI mkl-devel, GNU OpenMP layer; plain and with the weight
# pre-packed once) and LIBXSMM 1.17 (Debian libxsmm-dev, header-only). Each library is its own
# binary (bench/gemm_libraries.cpp); the binaries run in turn, ROUNDS rounds each, alternating.
# The PyPI wheels are fetched once into ~/.cache/moet/gemm-libs (nothing at run time of moet).
# usage: bash bench/gemm_libraries.sh [THREADS=2] [ROUNDS=9] [TOKENS=1024] [PASSES=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
threads=${1:-2} rounds=${2:-9} tokens=${3:-1024} passes=${4:-3}
cache="${MOET_CACHE_DIR:-$HOME/.cache/moet}/gemm-libs"
mkdir -p "$cache/wheels" "$cache/bin"
if [ ! -d "$cache/mkl" ] || [ ! -d "$cache/onednn3" ]; then
  pip download --no-deps -q -d "$cache/wheels" mkl==2026.2.0 mkl-devel==2026.2.0 \
    mkl-include==2026.2.0 onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
  for w in "$cache"/wheels/*.whl; do python3 -m zipfile -e "$w" "$cache/unzipped"; done
  mkdir -p "$cache/mkl" "$cache/onednn3"
  cp -r "$cache"/unzipped/mkl-*.data/data/lib "$cache/mkl/"
  cp -r "$cache"/unzipped/mkl_include-*.data/data/include "$cache/mkl/"
  cp -r "$cache"/unzipped/onednn_cpu_gomp-*.data/data/lib "$cache/onednn3/"
  cp -r "$cache"/unzipped/onednn_devel_cpu_gomp-*.data/data/include "$cache/onednn3/"
  ln -sf libmkl_rt.so.3 "$cache/mkl/lib/libmkl_rt.so"
fi
dpkg -s libxsmm-dev >/dev/null 2>&1 || apt-get install -y -q libxsmm-dev >/dev/null
src="$root/bench/gemm_libraries.cpp"
cxx=(g++ -std=c++20 -O3 -march=native -fopenmp -Wno-deprecated-declarations)
ob=/usr/lib/x86_64-linux-gnu/openblas-openmp
"${cxx[@]}" -DMOET_GEMM_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-openmp "$src" \
  -L$ob -lopenblas -Wl,-rpath,$ob -o "$cache/bin/openblas"
"${cxx[@]}" -DMOET_GEMM_DNNL "$src" -ldnnl -o "$cache/bin/onednn2"
"${cxx[@]}" -DMOET_GEMM_DNNL -I"$cache/onednn3/include" "$src" -L"$cache/onednn3/lib" -ldnnl \
  -Wl,-rpath,"$cache/onednn3/lib" -o "$cache/bin/onednn3"
"${cxx[@]}" -DMOET_GEMM_MKL -I"$cache/mkl/include" "$src" -L"$cache/mkl/lib" \
  -l:libmkl_intel_lp64.so.3 -l:libmkl_gnu_thread.so.3 -l:libmkl_core.so.3 -lgomp -lpthread -lm \
  -ldl -Wl,-rpath,"$cache/mkl/lib" -o "$cache/bin/mkl"
# Debian's header-only LIBXSMM includes its sources as ../src/*.c next to libxsmm_source.h
mkdir -p "$cache/xsmm/include" && cp /usr/include/libxsmm_source.h "$cache/xsmm/include/"
ln -sfn /usr/include/libxsmm "$cache/xsmm/src"
"${cxx[@]}" -w -DMOET_GEMM_LIBXSMM -I"$cache/xsmm/include" -I/usr/include/libxsmm "$src" \
  -L$ob -lopenblas -Wl,-rpath,$ob -lpthread -lrt -ldl -o "$cache/bin/libxsmm"
libs=(openblas onednn2 onednn3 mkl mkl-packed libxsmm)
out=$(mktemp -d)
for p in $(seq "$passes"); do
  for l in openblas onednn2 onednn3 mkl libxsmm; do
    [ -x "$cache/bin/$l" ] || continue
    LIBXSMM_VERBOSE=0 "$cache/bin/$l" "$threads" "$rounds" "$tokens" >"$out/$l.$p"
  done
done
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $threads threads; $tokens tokens a micro-batch; GFLOP/s, median of $passes passes (each the median of $rounds calls)"
python3 - "$out" "$passes" <<'PY'
import os, statistics, sys
d, passes = sys.argv[1], int(sys.argv[2])
names = {"openblas": "OpenBLAS 0.3", "onednn2": "oneDNN 2.6", "onednn3": "oneDNN 3.2",
         "mkl": "MKL 2026.2", "libxsmm": "LIBXSMM 1.17"}
table, cols = {}, []
for lib in names:
    for p in range(1, passes + 1):
        f = os.path.join(d, f"{lib}.{p}")
        if not os.path.exists(f):
            continue
        for line in open(f):
            shape, variant, gf = line.rstrip("\n").split("\t")
            col = f"{names[lib]} {variant}"
            if col not in cols:
                cols.append(col)
            table.setdefault(shape, {}).setdefault(col, []).append(float(gf))
for dtype in ("fp32", "bf16"):
    cs = [c for c in cols if f" {dtype}" in c]
    if not cs:
        continue
    print(f"\n{dtype} GEMMs, GFLOP/s:\n")
    print("| GEMM | " + " | ".join(cs) + " |")
    print("|---|" + "---|" * len(cs))
    for shape, vals in table.items():
        cells = [f"{statistics.median(vals[c]):.0f}" if c in vals else "–" for c in cs]
        print(f"| {shape} | " + " | ".join(cells) + " |")
PY
rm -rf "$out"
