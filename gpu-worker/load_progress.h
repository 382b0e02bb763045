/* gpu-worker/load_progress.h: what a person watching `sluice serve` or
 * `sluice generate` sees while a model loads.
 * Where:     the worker process and `sluice generate`, around sl_model_load
 *            and sl_backend_create (the model and kernel layers stay silent).
 * Who:       one thread; the struct lives on the caller's stack.
 * Output:    on a terminal, one line redrawn in place with '\r' (the stage,
 *            percent and MiB), then a final line with the total time; to a
 *            file or pipe, one line per finished stage (with its time) and
 *            the final line, never a '\r', so logs stay clean. A failed load
 *            prints nothing more than the caller's error line.
 * Errors:    progress output never fails a load; write errors are ignored. */
#ifndef SL_LOAD_PROGRESS_H
#define SL_LOAD_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"

#define SL_LOAD_PROGRESS_REDRAW_NS 100000000ull  /* terminal redraws at most every 100 ms */

typedef struct {
    FILE *out;
    bool tty;                /* out is a terminal: redraw in place */
    const char *who;         /* line prefix, e.g. "sluice worker" (static string) */
    uint64_t t0_ns;          /* init time: the final line's total */
    uint64_t stage_t0_ns;    /* current stage's start */
    uint64_t last_draw_ns;   /* last in-place redraw */
    char stage[160];         /* current stage text */
} sl_load_progress;

/* Starts timing. tty decides the style: callers pass isatty(fileno(out))
 * (a parameter, so tests can force either style). */
void sl_load_progress_init(sl_load_progress *p, FILE *out, bool tty, const char *who);

/* Begins a stage ("opening model.gguf"), ending the previous one. Not a
 * tty: the previous stage gets its line now ("<who>: <stage> (0.12 s)").
 * A tty: redraws the progress line with the new stage. */
void sl_load_progress_stage(sl_load_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports done of total bytes in the current stage. A tty: redraws the
 * line with percent and MiB (rate-limited, always at done == total). Not a
 * tty: prints nothing. */
void sl_load_progress_bytes(sl_load_progress *p, uint64_t done, uint64_t total);

/* Ends: clears the in-place line (a tty) and prints one final line
 * "<who>: <summary> in X.XX s" with the time since init. */
void sl_load_progress_done(sl_load_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The load failed: clears the in-place line (a tty) so the caller's error
 * line stands alone; the unfinished stage is not printed. */
void sl_load_progress_abort(sl_load_progress *p);

/* Reads every weight page of the model's mapping (one byte per 4 KiB page,
 * tensor by tensor) so the file is paged in now, while progress shows,
 * rather than during the first requests; reports bytes as a stage
 * "reading weights". For a model whose data is not file-backed (opened from
 * memory) it only walks memory. Never fails. */
void sl_load_progress_read_weights(sl_load_progress *p, const sl_model *m);

#endif
