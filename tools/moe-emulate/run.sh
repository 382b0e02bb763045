#!/bin/sh
# tools/moe-emulate/run.sh: builds emulate.cpp around the MoE kernels'
# own source (kernels/cuda/moe.cu up to its launchers, kernels/cuda/mmv_moe.cu
# up to sl_cuda_mmv_experts_supports, with __shared__ made static and the
# dynamic shared array pointed at mock.h's emu_dyn_shared) and the
# host quantizers (model/quant*.c) and the CPU's routing (kernels/cpu/ops.c),
# then runs it. Needs g++, gcc and the CUDA
# headers; no GPU. About 10 minutes on 2 shared cores (the barriers of a
# block's 256 pthreads dominate).
#   tools/moe-emulate/run.sh
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cut_kernels() {   # FILE STOP_REGEX OUT
  awk -v stop="$2" '$0 ~ stop {exit} {print}' "$1" |
    sed -e 's/extern __shared__ float4 \([a-z_0-9]*\)\[\];/float4 *\1 = emu_dyn_shared;/' -e 's/__shared__ /static /' -e 's/static __global__ void __launch_bounds__([^)]*)/void/' > "$3"
  grep -q '^void\|^    void\| void ' "$3" || { echo "moe-emulate: no kernel found in $1" >&2; exit 2; }
}
cut_kernels "$root/kernels/cuda/moe.cu" '^/\* launchers' "$tmp/moe_kernels.inc"
cut_kernels "$root/kernels/cuda/mmv_moe.cu" '^bool sl_cuda_mmv_experts_supports' "$tmp/mmv_moe_kernel.inc"
cp "$root/tools/moe-emulate/mock.h" "$root/tools/moe-emulate/emulate.cpp" "$tmp/"
objs=""
for f in ggml_types quant quant_legacy quant_klow quant_iq_grids quant_iq1_grid quant_ternary half; do
  gcc -O2 -std=c17 -I"$root" -c "$root/model/$f.c" -o "$tmp/$f.o"
  objs="$objs $tmp/$f.o"
done
gcc -O2 -std=c17 -I"$root" -c "$root/kernels/cpu/ops.c" -o "$tmp/ops.o"   # the CPU's routing, the reference
objs="$objs $tmp/ops.o"
g++ -O1 -std=c++17 -w -I"$root" -I"$cuda/include" -o "$tmp/emulate" "$tmp/emulate.cpp" $objs -lpthread -lm
"$tmp/emulate"
