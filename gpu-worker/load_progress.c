/* gpu-worker/load_progress.c: load progress for a person (terminal) or a log
 * (anything else). Runs in the worker and in `sluice generate`.
 * The CPU backend maps the GGUF file and reads weights in place, so the work
 * worth showing is paging the weights in: sl_load_progress_read_weights does
 * that up front (one byte per page), which also moves the disk reads out of
 * the first requests. The trade-off: a cold start reads the file before the
 * server says ready instead of during the first requests; a model larger
 * than free RAM pages in and out either way. */
#include "gpu-worker/load_progress.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

#define PAGE 4096u
#define MIB (1024.0 * 1024.0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sl_load_progress_init(sl_load_progress *p, FILE *out, bool tty, const char *who)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = tty;
    p->who = who ? who : "sluice";
    p->t0_ns = now_ns();
}

/* Not a tty: a finished stage is one line with its time. Printing at the end
 * rather than the start keeps a failed load to the caller's one error line. */
static void end_stage(sl_load_progress *p)
{
    if (p->stage[0] == '\0' || p->tty)
        return;
    fprintf(p->out, "%s: %s (%.2f s)\n", p->who, p->stage, (double)(now_ns() - p->stage_t0_ns) / 1e9);
    fflush(p->out);
}

void sl_load_progress_stage(sl_load_progress *p, const char *fmt, ...)
{
    end_stage(p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->stage, sizeof p->stage, fmt, ap);
    va_end(ap);
    p->stage_t0_ns = now_ns();
    if (p->tty) {
        /* "\033[K" clears what a longer earlier stage left on the line. */
        fprintf(p->out, "\r%s: %s\033[K", p->who, p->stage);
        fflush(p->out);
        p->last_draw_ns = p->stage_t0_ns;
    }
}

void sl_load_progress_abort(sl_load_progress *p)
{
    if (p->tty && p->stage[0] != '\0') {
        fprintf(p->out, "\r\033[K");
        fflush(p->out);
    }
    p->stage[0] = '\0';
}

void sl_load_progress_bytes(sl_load_progress *p, uint64_t done, uint64_t total)
{
    if (!p->tty)
        return;
    uint64_t t = now_ns();
    if (done < total && t - p->last_draw_ns < SL_LOAD_PROGRESS_REDRAW_NS)
        return;
    p->last_draw_ns = t;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    fprintf(p->out, "\r%s: %s %5.1f%% (%.0f / %.0f MiB)\033[K", p->who, p->stage, pct, (double)done / MIB,
            (double)total / MIB);
    fflush(p->out);
}

void sl_load_progress_done(sl_load_progress *p, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    end_stage(p);
    p->stage[0] = '\0';
    double s = (double)(now_ns() - p->t0_ns) / 1e9;
    fprintf(p->out, "%s%s: %s in %.2f s\n", p->tty ? "\r\033[K" : "", p->who, what, s);
    fflush(p->out);
}

void sl_load_progress_read_weights(sl_load_progress *p, const sl_model *m)
{
    uint64_t n = sl_gguf_n_tensors(m->gguf), total = 0, done = 0;
    for (uint64_t i = 0; i < n; i++)
        total += sl_gguf_tensor_at(m->gguf, i)->nbytes;
    sl_load_progress_stage(p, "reading weights (%.0f MiB)", (double)total / MIB);
    /* The sum is kept (volatile) so the compiler cannot drop the reads. */
    volatile unsigned char sink = 0;
    unsigned char acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        const sl_gguf_tensor *t = sl_gguf_tensor_at(m->gguf, i);
        const unsigned char *d = t->data;
        for (uint64_t off = 0; off < t->nbytes; off += PAGE) {
            acc ^= d[off];
            if ((off & ((1u << 24) - 1)) == 0)   /* every 16 MiB */
                sl_load_progress_bytes(p, done + off, total);
        }
        done += t->nbytes;
    }
    sink = acc;
    (void)sink;
    sl_load_progress_bytes(p, total, total);
}
