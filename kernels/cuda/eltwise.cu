/* kernels/cuda/eltwise.cu: grid-stride element-wise kernels: the last
 * layer's residual add (the other layers' are fused into rmsnorm.cu),
 * gpt-oss's bias rows,
 * SwiGLU for the steps that mmv.cu's fused gate+up+SwiGLU launch does not
 * take, gemma's GELU gate (always here), its embedding scale and its
 * logit soft cap. Each does the CPU's float operations (kernels/cpu/ops.c)
 * in the same order. They are memory bound and tiny next to the matmuls. A known cost:
 * one extra launch and one pass over the activations each; what would
 * remove it: fusing them into the matmul epilogues. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/eltwise.cuh"

#define THREADS 256

static unsigned grid_for(int64_t n)
{
    int64_t g = (n + THREADS - 1) / THREADS;
    return (unsigned)(g < 65536 ? g : 65536);
}

static __global__ void add_inplace(float *__restrict__ y, const float *__restrict__ x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        y[i] = __fadd_rn(y[i], x[i]);
}

static __global__ void add_rows_inplace(float *__restrict__ y, int64_t ldy, const float *__restrict__ b, int64_t T,
                                        int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < T * n; i += (int64_t)gridDim.x * THREADS) {
        int64_t t = i / n, c = i - t * n;
        y[t * ldy + c] = __fadd_rn(y[t * ldy + c], b[c]);
    }
}

static __global__ void swiglu_inplace(float *__restrict__ gate, const float *__restrict__ up, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) {
        float g = gate[i];
        gate[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
    }
}

static __global__ void scale_inplace(float *__restrict__ x, float s, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        x[i] = __fmul_rn(x[i], s);
}

/* 0.5 g (1 + tanh(c g (1 + 0.044715 g^2))) u, in ops.c's order */
static __global__ void geglu_tanh_inplace(float *__restrict__ gate, const float *__restrict__ up, int64_t n)
{
    const float c = 0.7978845608028654f;   /* sqrt(2/pi) */
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) {
        float g = gate[i];
        float inner = __fmul_rn(__fmul_rn(c, g), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, g), g)));
        gate[i] = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner))), up[i]);
    }
}

static __global__ void softcap_inplace(float *__restrict__ x, float cap, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        x[i] = __fmul_rn(cap, tanhf(__fdiv_rn(x[i], cap)));
}

sl_status sl_cuda_scale(float *x, float s, int64_t n, cudaStream_t stream)
{
    if (n < 1)
        return SL_OK;
    scale_inplace<<<grid_for(n), THREADS, 0, stream>>>(x, s, n);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_geglu_tanh(float *gate, const float *up, int64_t n, cudaStream_t stream)
{
    if (n < 1)
        return SL_OK;
    geglu_tanh_inplace<<<grid_for(n), THREADS, 0, stream>>>(gate, up, n);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_softcap(float *x, float cap, int64_t n, cudaStream_t stream)
{
    if (n < 1)
        return SL_OK;
    softcap_inplace<<<grid_for(n), THREADS, 0, stream>>>(x, cap, n);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_add(float *y, const float *x, int64_t n, cudaStream_t stream)
{
    if (n < 1)
        return SL_OK;
    add_inplace<<<grid_for(n), THREADS, 0, stream>>>(y, x, n);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_add_rows(float *y, int64_t ldy, const float *b, int64_t T, int64_t n, cudaStream_t stream)
{
    if (T < 1 || n < 1)
        return SL_OK;
    if (ldy < n)
        return SL_EINVAL;
    add_rows_inplace<<<grid_for(T * n), THREADS, 0, stream>>>(y, ldy, b, T, n);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_swiglu(float *gate, const float *up, int64_t n, cudaStream_t stream)
{
    if (n < 1)
        return SL_OK;
    swiglu_inplace<<<grid_for(n), THREADS, 0, stream>>>(gate, up, n);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
