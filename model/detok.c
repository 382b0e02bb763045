/* model/detok.c: streaming detokenizer. Emits only complete UTF-8 and turns
 * invalid bytes into U+FFFD the way the reference decoders do:
 *   - byte-level (gpt2) vocabularies: all pieces form one byte stream,
 *     decoded like Rust's String::from_utf8_lossy (one U+FFFD per maximal
 *     invalid subpart), so only the bytes of an unfinished character are held;
 *   - SentencePiece vocabularies: a run of <0xNN> tokens is one group that is
 *     either valid UTF-8 as a whole or becomes one U+FFFD per byte (HF's
 *     ByteFallback decoder), so the whole run is held until a non-byte token
 *     or the flush; U+2581 is a space, and with add_space_prefix one leading
 *     space of the output is dropped (HF's Strip decoder), unless the output
 *     continues a prompt (sl_detok_init_continuation).
 * Runs in: front ends, per request; the state lives in the request.
 * Trade-off: a byte run longer than the hold buffer (64 bytes) is emitted
 * by complete characters as the buffer fills; the reference decodes the run
 * in one piece, which differs only when such a long run is invalid. */
#include <string.h>

#include "model/tokenizer_internal.h"

#define HOLD_MAX sizeof(((sl_detok *)0)->_held)

typedef struct {
    char *out;
    size_t cap, n;
} dt_out;

static void put(sl_detok *d, const sl_tokenizer *t, dt_out *o, const char *p, size_t n)
{
    if (!d->_started && n && t->add_space_prefix) {
        if (p[0] == ' ') {
            p++;
            n--;
        }
    }
    if (n)
        d->_started = true;
    for (size_t i = 0; i < n; i++) {
        if (o->n < o->cap)
            o->out[o->n] = p[i];
        o->n++;
    }
}

static void put_fffd(sl_detok *d, const sl_tokenizer *t, dt_out *o)
{
    put(d, t, o, "\xef\xbf\xbd", 3);
}

/* Expected length of a sequence led by c, 0 if c cannot lead. */
static unsigned seq_len(uint8_t c)
{
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

/* May byte c follow the held prefix h[0..n)? (Unicode Table 3-7.) */
static bool continues(const uint8_t *h, unsigned n, uint8_t c)
{
    if (n == 1) {
        switch (h[0]) {
        case 0xe0: return c >= 0xa0 && c <= 0xbf;
        case 0xed: return c >= 0x80 && c <= 0x9f;
        case 0xf0: return c >= 0x90 && c <= 0xbf;
        case 0xf4: return c >= 0x80 && c <= 0x8f;
        default: break;
        }
    }
    return c >= 0x80 && c <= 0xbf;
}

/* Byte-level stream: lossy UTF-8 with only an unfinished character held. */
static void stream_bytes(sl_detok *d, const sl_tokenizer *t, dt_out *o, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (d->_n_held) {
            if (continues(d->_held, d->_n_held, c)) {
                d->_held[d->_n_held++] = c;
                if (d->_n_held == seq_len(d->_held[0])) {
                    put(d, t, o, (const char *)d->_held, d->_n_held);
                    d->_n_held = 0;
                }
                continue;
            }
            put_fffd(d, t, o);   /* the maximal subpart so far, then reread c */
            d->_n_held = 0;
        }
        unsigned l = seq_len(c);
        if (l == 1)
            put(d, t, o, (const char *)&c, 1);
        else if (l == 0)
            put_fffd(d, t, o);
        else
            d->_held[d->_n_held++] = c;
    }
}

static bool valid_utf8(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned l = seq_len(p[i]);
        if (!l || i + l > n)
            return false;
        for (unsigned k = 1; k < l; k++)
            if (!continues(p + i, k, p[i + k]))
                return false;
        i += l;
    }
    return true;
}

/* SentencePiece: a finished run of byte tokens. */
static void flush_group(sl_detok *d, const sl_tokenizer *t, dt_out *o)
{
    if (!d->_n_held)
        return;
    if (valid_utf8(d->_held, d->_n_held))
        put(d, t, o, (const char *)d->_held, d->_n_held);
    else
        for (uint32_t i = 0; i < d->_n_held; i++)
            put_fffd(d, t, o);
    d->_n_held = 0;
    d->_held_bytes_tok = false;
}

/* The hold is full in the middle of a byte run: emit its complete
 * characters and keep an unfinished tail, so long valid runs (emoji, CJK
 * spelled in bytes) decode as the reference does. Only an invalid run
 * longer than the hold can differ (the reference would make every byte of
 * the whole run U+FFFD; here only the part from the last cut). */
static void flush_full_group(sl_detok *d, const sl_tokenizer *t, dt_out *o)
{
    uint32_t keep = 0;
    for (uint32_t back = 1; back <= 3 && back <= d->_n_held; back++) {
        unsigned l = seq_len(d->_held[d->_n_held - back]);
        if (l > 1) {
            if (l > back)
                keep = back;
            break;
        }
    }
    uint32_t cut = d->_n_held - keep;
    if (!valid_utf8(d->_held, cut)) {
        flush_group(d, t, o);
        return;
    }
    put(d, t, o, (const char *)d->_held, cut);
    memmove(d->_held, d->_held + cut, keep);
    d->_n_held = keep;
}

void sl_detok_init(sl_detok *d)
{
    memset(d, 0, sizeof *d);
}

void sl_detok_init_continuation(sl_detok *d)
{
    memset(d, 0, sizeof *d);
    d->_started = true;    /* the prompt came first: no leading space is the sequence's */
}

size_t sl_detok_max_piece(const sl_tokenizer *t)
{
    return t->max_piece;
}

static void push_into(sl_detok *d, const sl_tokenizer *t, int32_t id, bool show_special,
                      dt_out *o)
{
    if (id < 0 || id >= t->n_vocab)
        return;
    uint8_t a = t->attr[id];
    if (!show_special && (a == SL_TOKEN_ATTR_CONTROL || a == SL_TOKEN_ATTR_UNKNOWN))
        return;
    const char *p = t->piece + t->piece_off[id];
    size_t n = t->piece_off[id + 1] - t->piece_off[id];
    if (t->kind == SL_TOK_KIND_BPE) {
        stream_bytes(d, t, o, (const uint8_t *)p, n);
        return;
    }
    if (a == SL_TOKEN_ATTR_BYTE && n == 1) {
        if (d->_n_held == HOLD_MAX)
            flush_full_group(d, t, o);
        d->_held[d->_n_held++] = (uint8_t)p[0];
        d->_held_bytes_tok = true;
        return;
    }
    flush_group(d, t, o);
    put(d, t, o, p, n);
}

size_t sl_detok_push(sl_detok *d, const sl_tokenizer *t, int32_t id, bool show_special,
                     char *out, size_t cap)
{
    dt_out o = {out, cap, 0};
    push_into(d, t, id, show_special, &o);
    return o.n;
}

static void flush_into(sl_detok *d, const sl_tokenizer *t, dt_out *o)
{
    if (d->_held_bytes_tok) {
        flush_group(d, t, o);
    } else if (d->_n_held) {   /* an unfinished character: one U+FFFD, as from_utf8_lossy */
        d->_n_held = 0;
        put_fffd(d, t, o);
    }
    d->_held_bytes_tok = false;
}

size_t sl_detok_flush(sl_detok *d, const sl_tokenizer *t, char *out, size_t cap)
{
    dt_out o = {out, cap, 0};
    flush_into(d, t, &o);
    return o.n;
}

size_t sl_detokenize(const sl_tokenizer *t, const int32_t *ids, size_t n, bool show_special,
                     char *out, size_t cap)
{
    sl_detok d;
    sl_detok_init(&d);
    dt_out o = {out, cap, 0};
    for (size_t i = 0; i < n; i++)
        push_into(&d, t, ids[i], show_special, &o);
    flush_into(&d, t, &o);
    return o.n;
}
