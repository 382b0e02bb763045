#!/bin/sh
# tools/mmvq-emulate/run.sh: builds emulate.cpp around the integer
# small-batch matmul's own source (kernels/cuda/mmvq.cu up to
# sl_cuda_mmvq_supports, with __shared__ made static), the host quantizers
# (model/quant*.c) and the CPU backend's activation rounding and 8-bit dot
# products (kernels/cpu/act_quant.c, vec_dot_q8.c and what they call), then
# runs it. Needs g++, gcc and the CUDA headers; no GPU. One to five minutes on
# 2 shared cores (the pthread barriers dominate).
#   tools/mmvq-emulate/run.sh
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^bool sl_cuda_mmvq_supports/ {exit} {print}' "$root/kernels/cuda/mmvq.cu" |
  sed -e 's/__shared__ /static /' -e 's/static __global__ void __launch_bounds__([^)]*)/void/' > "$tmp/mmvq_kernels.inc"
grep -q '^mmvq_warp_per_row' "$tmp/mmvq_kernels.inc" || { echo "mmvq-emulate: no kernel found in mmvq.cu" >&2; exit 2; }
objs=""
for f in model/ggml_types model/quant model/quant_legacy model/quant_klow model/quant_iq_grids model/quant_iq1_grid \
         model/quant_ternary model/half kernels/cpu/act_quant kernels/cpu/vec_dot_q8 kernels/cpu/vec_dot_legacy \
         kernels/cpu/vec_dot_klow; do
  o="$tmp/$(basename "$f").o"
  gcc -O2 -std=c17 -D_GNU_SOURCE -I"$root" -c "$root/$f.c" -o "$o"
  objs="$objs $o"
done
g++ -O1 -std=c++17 -w -I"$root" -I"$cuda/include" -I"$tmp" -o "$tmp/emulate" "$root/tools/mmvq-emulate/emulate.cpp" \
  $objs -lpthread -lm
"$tmp/emulate"
