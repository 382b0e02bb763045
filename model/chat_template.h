/* model/chat_template.h: renders a model's chat template (Jinja) into the
 * prompt text, and says which bytes of that text came from the user.
 * Where:     the front end compiles the model's `tokenizer.chat_template` (or
 *            a --chat-template override) once at load and renders it for each
 *            chat request; `sluice generate` and tools do the same.
 * Semantics: those of transformers' apply_chat_template(tokenize=False):
 *            jinja2's ImmutableSandboxedEnvironment with trim_blocks,
 *            lstrip_blocks and loop controls, its non-escaping tojson,
 *            raise_exception and strftime_now. docs/CHAT_TEMPLATES.md lists the
 *            supported subset and the templates we refuse.
 * Provenance: every byte of output that came from `messages`, `tools` or the
 *            extra variables is "untrusted"; the result lists those bytes as
 *            sorted, disjoint spans. The tokenizer recognises special tokens
 *            only outside them, so a user who types "<|im_end|>" gets text.
 * Safety:    any template bytes and any messages give a result or an error,
 *            never a crash, an unbounded loop or unbounded memory: nesting,
 *            loop iterations, output size (8 MiB), memory and render time
 *            (2 s of wall time: SL_ERANGE) are capped.
 * Threads:   a compiled template is read-only; renders may run concurrently.
 * Errors:    SL_OK; SL_EFORMAT (template does not parse), SL_EUNSUPPORTED
 *            (construct outside the subset), SL_EINVAL (render error, including
 *            raise_exception: err holds the template's own message; the front
 *            end answers 400), SL_ERANGE (a limit was hit), SL_ENOMEM. */
#ifndef SL_CHAT_TEMPLATE_H
#define SL_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/span.h"
#include "shared/status.h"

typedef struct sl_chat_template sl_chat_template; /* opaque: the parsed template */

typedef struct {
    bool has_now;            /* true: strftime_now() uses `now` (tests freeze time) */
    int64_t now;             /* seconds since the epoch, rendered in local time */
    const json_t *extra_vars; /* optional object of more template variables
                              * (e.g. enable_thinking, documents); untrusted;
                              * messages/tools/bos/eos/add_generation_prompt win */
} sl_chat_render_opts;

typedef struct {
    char *text;              /* rendered prompt, NUL-terminated; owned */
    size_t len;              /* bytes in text, without the NUL */
    sl_span *untrusted;      /* sorted, disjoint, non-adjacent ranges of text; owned */
    size_t n_untrusted;
} sl_chat_render_result;

/* Parses a template once.
 * src/len:  template source (need not be NUL-terminated).
 * out:      OUT: the template, or NULL on failure; free with _destroy.
 * err:      OUT: on failure, one line with the template line and the problem.
 * Returns SL_OK, SL_EFORMAT, SL_EUNSUPPORTED or SL_ENOMEM. */
sl_status sl_chat_template_compile(const char *src, size_t len, sl_chat_template **out,
                                   char err[SL_ERR_LEN]);

/* Frees a compiled template; NULL is a no-op. */
void sl_chat_template_destroy(sl_chat_template *t);

/* Renders one conversation.
 * messages: JSON array of message objects (role, content as string, null or a
 *           list of {"type":"text","text":...} parts, tool_calls,
 *           tool_call_id, name); passed to the template as given.
 * tools:    JSON array of tool definitions, or NULL (the template sees none).
 * bos/eos:  the model's BOS/EOS token text (trusted); NULL means "".
 * opts:     NULL for defaults (current time, no extra variables).
 * out:      OUT: on success, text and untrusted spans (free with _fini); on
 *           failure zeroed.
 * err:      OUT: on failure, the reason (raise_exception's own message).
 * Blocks only on CPU work bounded by the limits above. */
sl_status sl_chat_template_render(const sl_chat_template *t, const json_t *messages,
                                  const json_t *tools, bool add_generation_prompt,
                                  const char *bos, const char *eos,
                                  const sl_chat_render_opts *opts, sl_chat_render_result *out,
                                  char err[SL_ERR_LEN]);

/* Frees what a successful render put in *r and zeroes it; safe on a zeroed result. */
void sl_chat_render_result_fini(sl_chat_render_result *r);

/* Source of a named built-in template for models without one: "chatml",
 * "llama2", "llama3", "mistral", "gemma", "phi3". NULL for an unknown name.
 * The string is static. */
const char *sl_chat_template_builtin(const char *name);

/* Name of the built-in for a model whose file has no template, from its
 * general.architecture (len bytes, not terminated; NULL: unknown): "gemma"
 * for gemma, gemma2 and gemma3 (their base models ship without one and
 * Gemma's turn format is what the instruction-tuned ones use), else
 * "chatml", what most other such models were tuned on. */
const char *sl_chat_template_default_name(const char *arch, size_t len);

#endif
