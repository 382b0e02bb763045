/* kernels/cpu/ops.c: row operations of the forward pass (see ops.h).
 * Sums of squares run in double: it costs nothing next to the matmuls and
 * keeps the result independent of vector width. */
#include <math.h>

#include "kernels/cpu/ops.h"

void sl_cpu_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void sl_cpu_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_t, const float *sin_t,
                 int neox)
{
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * cos_t[i] - x1 * sin_t[i];
            v[b] = x0 * sin_t[i] + x1 * cos_t[i];
        }
    }
}

void sl_cpu_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void sl_cpu_swiglu_oai(float *out, const float *gate, const float *up, int64_t n)
{
    const float alpha = 1.702f, limit = 7.0f;   /* llama.cpp's constants for gpt-oss */
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i] < limit ? gate[i] : limit;
        float y = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        out[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

void sl_cpu_geglu_tanh(float *out, const float *gate, const float *up, int64_t n)
{
    const float c = 0.7978845608028654f;   /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x))) * up[i];
    }
}

void sl_cpu_softcap(float *x, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}

void sl_cpu_scale(float *x, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

void sl_cpu_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void sl_cpu_moe_route(const float *logits, int n, int k, bool norm, float *scratch, int32_t *ids, float *w)
{
    float mx = logits[0];
    for (int e = 1; e < n; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < n; e++) {
        scratch[e] = expf(logits[e] - mx);
        sum += scratch[e];
    }
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < n; e++)
        scratch[e] *= inv;
    /* k passes of a strict-greater scan from index 0: the first maximum
     * wins ties; a taken expert is marked -1 (below every probability) */
    double wsum = 0.0;
    for (int j = 0; j < k; j++) {
        int best = 0;
        while (scratch[best] == -1.0f)   /* the first untaken one: k <= n keeps it in range */
            best++;
        for (int e = best + 1; e < n; e++)
            if (scratch[e] > scratch[best])
                best = e;
        ids[j] = best;
        w[j] = scratch[best];
        wsum += w[j];
        scratch[best] = -1.0f;
    }
    if (norm) {
        float s = (float)wsum < 6.103515625e-5f ? 6.103515625e-5f : (float)wsum;
        for (int j = 0; j < k; j++)
            w[j] /= s;
    }
}

void sl_cpu_moe_route_topk_softmax(const float *logits, int n, int k, float *scratch, int32_t *ids, float *w)
{
    /* scratch marks taken experts (1); each pass keeps the first strict
     * maximum among the untaken, a NaN never replacing a number */
    for (int e = 0; e < n; e++)
        scratch[e] = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            if (scratch[e] != 0.0f)
                continue;
            if (best < 0 || logits[e] > logits[best] || (isnan(logits[best]) && !isnan(logits[e])))
                best = e;
        }
        ids[j] = best;
        scratch[best] = 1.0f;
    }
    float mx = logits[ids[0]];
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        w[j] = expf(logits[ids[j]] - mx);
        sum += w[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < k; j++)
        w[j] *= inv;
}
