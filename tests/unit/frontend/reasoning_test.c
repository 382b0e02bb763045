/* tests/unit/frontend/reasoning_test.c: frontend/reasoning.c: the <think>
 * block at the start, an open block from the prompt, an unterminated block,
 * literal tags later on, and every split of a feed giving the same result. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/reasoning.h"

typedef struct {
    char reasoning[2048], content[2048];
    size_t nr, nc;
    bool empty;
} split;

static sl_status on_text(void *ctx, sl_reasoning_event_kind k, const char *s, size_t n)
{
    split *r = ctx;
    if (n == 0)
        r->empty = true;
    char *b = k == SL_REASONING_EVENT_REASONING ? r->reasoning : r->content;
    size_t *l = k == SL_REASONING_EVENT_REASONING ? &r->nr : &r->nc;
    cr_assert_lt(*l + n, sizeof r->content);
    memcpy(b + *l, s, n);
    *l += n;
    b[*l] = '\0';
    return SL_OK;
}

static split feed(const char *text, bool open, const size_t *cuts, size_t n_cuts)
{
    sl_reasoning r;
    sl_reasoning_init(&r, open);
    split out;
    memset(&out, 0, sizeof out);
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i < n_cuts; i++) {
        cr_assert_eq(sl_reasoning_feed(&r, text + at, cuts[i] - at, false, on_text, &out), SL_OK);
        at = cuts[i];
    }
    cr_assert_eq(sl_reasoning_feed(&r, text + at, len - at, true, on_text, &out), SL_OK);
    cr_assert_eq(sl_reasoning_feed(&r, "", 0, true, on_text, &out), SL_ESTATE);
    sl_reasoning_fini(&r);
    return out;
}

/* Whole, split once at every byte, and byte by byte: the same. */
static split check(const char *text, bool open, const char *want_r, const char *want_c)
{
    split w = feed(text, open, NULL, 0);
    cr_assert_str_eq(w.reasoning, want_r, "%s", text);
    cr_assert_str_eq(w.content, want_c, "%s", text);
    size_t len = strlen(text);
    for (size_t k = 0; k <= len; k++) {
        split s = feed(text, open, &k, 1);
        cr_assert_str_eq(s.reasoning, want_r, "split at %zu of %s", k, text);
        cr_assert_str_eq(s.content, want_c, "split at %zu of %s", k, text);
        cr_assert(!s.empty);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t k = 0; k < len; k++)
        cuts[k] = k + 1;
    split b = feed(text, open, cuts, len);
    free(cuts);
    cr_assert_str_eq(b.reasoning, want_r);
    cr_assert_str_eq(b.content, want_c);
    return w;
}

Test(reasoning, block_at_the_start)
{
    check("<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.", false, "Let me see: 2+2.\n", "It is 4.");
    check("  \n<think>x</think>y", false, "x", "y");
}

Test(reasoning, no_block)
{
    check("Just an answer.", false, "", "Just an answer.");
    check("\n\nIndented answer", false, "", "\n\nIndented answer");
    check("", false, "", "");
    check("  ", false, "", "  ");
    check("<thinking>not ours</thinking>", false, "", "<thinking>not ours</thinking>");
    check("<thi", false, "", "<thi");
}

Test(reasoning, later_tags_stay_content)
{
    check("Use <think> tags like <think>this</think>.", false, "", "Use <think> tags like <think>this</think>.");
    check("<think>a</think>b <think>c</think>", false, "a", "b <think>c</think>");
}

Test(reasoning, open_from_the_prompt)
{
    check("Okay, so the user asks.\n</think>\n\nHello!", true, "Okay, so the user asks.\n", "Hello!");
    check("</think>Hi", true, "", "Hi");
}

Test(reasoning, unterminated_block_is_all_reasoning)
{
    check("<think>\nhmm, still thinking", false, "hmm, still thinking", "");
    check("thinking </thi", true, "thinking </thi", "");
}

Test(reasoning, empty_block)
{
    check("<think>\n\n</think>\n\nAnswer", false, "", "Answer");
}

Test(reasoning, detection)
{
    const char *q3 = "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}";
    cr_assert(sl_reasoning_template_thinks(q3, strlen(q3)));
    const char *plain = "{{ '<|im_start|>assistant\\n' }}";
    cr_assert(!sl_reasoning_template_thinks(plain, strlen(plain)));
    cr_assert(!sl_reasoning_template_thinks(NULL, 0));
    const char *p1 = "<｜Assistant｜><think>\n";
    cr_assert(sl_reasoning_prompt_opens(p1, strlen(p1)));
    const char *p2 = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    cr_assert(!sl_reasoning_prompt_opens(p2, strlen(p2)));
    cr_assert(!sl_reasoning_prompt_opens("", 0));
}
