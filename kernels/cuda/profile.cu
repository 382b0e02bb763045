/* kernels/cuda/profile.cu: see profile.cuh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/profile.cuh"

#define MAX_MARKS 4096
#define CLASSES 5   /* T = 1, 2-8, 9-64, 65-512, more */

static const char *const kind_name[SL_PROF_KINDS] = {
    "embed", "rmsnorm", "matmul q/k/v", "qk-norm/rope/kv", "attention", "matmul o", "matmul gate+up",
    "matmul down", "add/swiglu", "output norm+matmul", "logits to host", "sampling",
    "moe router+routing+grouping"};
static const char *const class_name[CLASSES] = {"T=1", "T=2-8", "T=9-64", "T=65-512", "T>512"};

struct sl_cuda_profile {
    cudaEvent_t ev[MAX_MARKS + 1];
    uint8_t kind[MAX_MARKS + 1];
    int n;                         /* events recorded this step (ev[0] = begin) */
    bool ok;
    double ms[CLASSES][SL_PROF_KINDS];
    double step_ms[CLASSES];
    long steps[CLASSES], rows[CLASSES];
    double t_begin, t_end;         /* host clock (ms) at this step's begin, the previous step's end */
    double wall_ms, gap_ms;        /* host: inside steps, between steps (the worker's own time) */
    long n_gaps;
};

static double host_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

sl_cuda_profile *sl_cuda_profile_create_from_env(void)
{
    const char *e = getenv("SLUICE_CUDA_PROFILE");
    if (!e || strcmp(e, "1") != 0)
        return NULL;
    sl_cuda_profile *p = (sl_cuda_profile *)calloc(1, sizeof *p);
    if (!p)
        return NULL;
    for (int i = 0; i <= MAX_MARKS; i++)
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            for (int j = 0; j < i; j++)
                cudaEventDestroy(p->ev[j]);
            free(p);
            return NULL;
        }
    return p;
}

static int class_of(int64_t T)
{
    return T <= 1 ? 0 : T <= 8 ? 1 : T <= 64 ? 2 : T <= 512 ? 3 : 4;
}

void sl_cuda_profile_destroy(sl_cuda_profile *p)
{
    if (!p)
        return;
    for (int c = 0; c < CLASSES; c++) {
        if (!p->steps[c])
            continue;
        fprintf(stderr, "cuda profile %s: %ld steps, %.1f rows/step, %.3f ms/step\n", class_name[c], p->steps[c],
                (double)p->rows[c] / p->steps[c], p->step_ms[c] / p->steps[c]);
        for (int k = 0; k < SL_PROF_KINDS; k++)
            if (p->ms[c][k] > 0)
                fprintf(stderr, "  %-20s %8.3f ms/step %5.1f%%\n", kind_name[k], p->ms[c][k] / p->steps[c],
                        100.0 * p->ms[c][k] / p->step_ms[c]);
    }
    long n = 0;
    for (int c = 0; c < CLASSES; c++)
        n += p->steps[c];
    if (n && p->n_gaps)
        fprintf(stderr, "cuda profile host: %.3f ms/step inside a step (launch to results), %.3f ms between steps "
                "(scheduler, sampling staging, delivery)\n", p->wall_ms / n, p->gap_ms / p->n_gaps);
    for (int i = 0; i <= MAX_MARKS; i++)
        cudaEventDestroy(p->ev[i]);
    free(p);
}

void sl_cuda_profile_begin(sl_cuda_profile *p, cudaStream_t st)
{
    if (!p)
        return;
    p->n = 0;
    p->t_begin = host_ms();
    if (p->t_end > 0 && p->t_begin - p->t_end < 50.0) {   /* longer: the worker was idle */
        p->gap_ms += p->t_begin - p->t_end;
        p->n_gaps++;
    }
    p->ok = cudaEventRecord(p->ev[0], st) == cudaSuccess;
}

void sl_cuda_profile_mark(sl_cuda_profile *p, sl_prof_kind kind, cudaStream_t st)
{
    if (!p || !p->ok || p->n >= MAX_MARKS)
        return;
    p->n++;
    p->kind[p->n] = (uint8_t)kind;
    p->ok = cudaEventRecord(p->ev[p->n], st) == cudaSuccess;
}

void sl_cuda_profile_end(sl_cuda_profile *p, int64_t T)
{
    if (!p || !p->ok || p->n == 0)
        return;
    int c = class_of(T);
    float total = 0;
    for (int i = 1; i <= p->n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) != cudaSuccess)
            return;
        p->ms[c][p->kind[i]] += ms;
        total += ms;
    }
    p->step_ms[c] += total;
    p->steps[c]++;
    p->t_end = host_ms();
    p->wall_ms += p->t_end - p->t_begin;
    p->rows[c] += T;
}
