/* kernels/cpu/moe_watch.c: see moe_watch.h. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/moe_watch.h"
#include "model/model.h"

static sl_cpu_moe_watch_fn watch_fn;
static void *watch_ctx;

void sl_cpu_moe_watch(sl_cpu_moe_watch_fn fn, void *ctx)
{
    watch_fn = fn;
    watch_ctx = ctx;
}

sl_cpu_moe_watch_fn sl_cpu_moe_watcher(void **ctx)
{
    *ctx = watch_ctx;
    return watch_fn;
}

static int by_value_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

float sl_cpu_moe_margin(const float *logits, int n, int k)
{
    if (k < 1 || k >= n || n > SL_MOE_MAX_EXPERTS)
        return INFINITY;
    float v[SL_MOE_MAX_EXPERTS];
    for (int i = 0; i < n; i++)
        v[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    qsort(v, (size_t)n, sizeof *v, by_value_desc);   /* a check tool's path: clarity over speed */
    return v[k - 1] - v[k];
}
