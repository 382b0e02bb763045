/* tests/unit/gpu-worker/kv_blocks_test.c: gpu-worker/kv_blocks.c accounting. */
#include <criterion/criterion.h>
#include <string.h>

#include "gpu-worker/kv_blocks.h"

Test(kv_blocks, init_rejects_zero_sizes)
{
    sl_kv_blocks kv;
    cr_assert_eq(sl_kv_blocks_init(&kv, 0, 16), SL_EINVAL);
    sl_kv_blocks_fini(&kv);
    cr_assert_eq(sl_kv_blocks_init(&kv, 8, 0), SL_EINVAL);
    sl_kv_blocks_fini(&kv);
    cr_assert_eq(sl_kv_blocks_init(&kv, 8, 16), SL_OK);
    sl_kv_table t;
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &t, 0), SL_EINVAL);
    sl_kv_blocks_table_fini(&t);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, reserve_covers_positions_in_id_order)
{
    sl_kv_blocks kv;
    sl_kv_table t;
    cr_assert_eq(sl_kv_blocks_init(&kv, 10, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &t, 100), SL_OK);
    cr_assert_eq(t.capacity, 7);   /* ceil(100 / 16) */
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 10);
    cr_assert_eq(sl_kv_blocks_needed(&kv, NULL, 17), 2);
    cr_assert_eq(sl_kv_blocks_needed(&kv, &t, 0), 0);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 17), SL_OK);
    cr_assert_eq(t.n_used, 2);
    cr_assert_eq(t.blocks[0], 0);
    cr_assert_eq(t.blocks[1], 1);
    cr_assert_eq(sl_kv_blocks_needed(&kv, &t, 32), 0);
    cr_assert_eq(sl_kv_blocks_needed(&kv, &t, 33), 1);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 32), SL_OK);   /* covered: no-op */
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 5), SL_OK);    /* never shrinks */
    cr_assert_eq(t.n_used, 2);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 33), SL_OK);
    cr_assert_eq(t.blocks[2], 2);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 7);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, 2), 1);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, 3), 0);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, -1), 0);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, 10), 0);
    const sl_kv_table *all[] = { &t };
    cr_assert(sl_kv_blocks_check(&kv, all, 1));
    sl_kv_blocks_release(&kv, &t);
    sl_kv_blocks_table_fini(&t);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, exhaustion_returns_again_without_partial_allocation)
{
    sl_kv_blocks kv;
    sl_kv_table a, b;
    cr_assert_eq(sl_kv_blocks_init(&kv, 5, 4), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &a, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &b, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 12), SL_OK);   /* 3 blocks */
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 4), SL_OK);    /* 1 block */
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 12), SL_AGAIN); /* needs 2, 1 free */
    cr_assert_eq(b.n_used, 1);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 1);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 8), SL_OK);    /* exactly the last one */
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 0);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 13), SL_AGAIN);
    cr_assert_eq(a.n_used, 3);
    const sl_kv_table *all[] = { &a, &b };
    cr_assert(sl_kv_blocks_check(&kv, all, 2));
    sl_kv_blocks_release(&kv, &a);                             /* the scheduler preempts a */
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 20), SL_OK);
    cr_assert(sl_kv_blocks_check(&kv, all, 2));
    sl_kv_blocks_release(&kv, &b);
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, reserve_past_capacity_is_erange)
{
    sl_kv_blocks kv;
    sl_kv_table t;
    cr_assert_eq(sl_kv_blocks_init(&kv, 100, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &t, 32), SL_OK);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 33), SL_ERANGE);
    cr_assert_eq(t.n_used, 0);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 100);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, UINT32_MAX), SL_ERANGE);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 32), SL_OK);
    sl_kv_blocks_release(&kv, &t);
    sl_kv_blocks_table_fini(&t);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, release_restores_free_count_and_ids)
{
    sl_kv_blocks kv;
    sl_kv_table t;
    cr_assert_eq(sl_kv_blocks_init(&kv, 8, 2), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &t, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 9), SL_OK);
    int32_t first[5];
    memcpy(first, t.blocks, sizeof first);
    sl_kv_blocks_release(&kv, &t);
    cr_assert_eq(t.n_used, 0);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 8);
    sl_kv_blocks_release(&kv, &t);   /* empty table: no-op */
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 8);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &t, 9), SL_OK);
    cr_assert_arr_eq(t.blocks, first, sizeof first);   /* recompute lands on the same ids */
    sl_kv_blocks_release(&kv, &t);
    sl_kv_blocks_table_fini(&t);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, touched_counts_distinct_blocks_ever_handed_out)
{
    sl_kv_blocks kv;
    sl_kv_table a, b;
    cr_assert_eq(sl_kv_blocks_init(&kv, 8, 2), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &a, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &b, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_touched(&kv), 0);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 5), SL_OK);   /* 3 blocks */
    cr_assert_eq(sl_kv_blocks_touched(&kv), 3);
    sl_kv_blocks_release(&kv, &a);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 5), SL_OK);   /* the same 3 again */
    cr_assert_eq(sl_kv_blocks_touched(&kv), 3);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 4), SL_OK);   /* 2 fresh ones */
    cr_assert_eq(sl_kv_blocks_touched(&kv), 5);
    sl_kv_blocks_release(&kv, &a);
    sl_kv_blocks_release(&kv, &b);
    cr_assert_eq(sl_kv_blocks_touched(&kv), 5);   /* a high-water mark: freeing does not lower it */
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, shared_blocks_free_only_with_last_holder)
{
    sl_kv_blocks kv;
    sl_kv_table a, b, c;
    cr_assert_eq(sl_kv_blocks_init(&kv, 16, 4), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &a, 32), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &b, 32), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &c, 8), SL_OK);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 14), SL_OK);   /* 4 blocks, last one partial */
    cr_assert_eq(sl_kv_blocks_share(&kv, &b, &a, 3), SL_OK);  /* the 3 full ones */
    cr_assert_eq(sl_kv_blocks_share(&kv, &c, &a, 2), SL_OK);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 12);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, a.blocks[0]), 3);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, a.blocks[2]), 2);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, a.blocks[3]), 1);
    cr_assert_eq(b.blocks[2], a.blocks[2]);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 14), SL_OK);   /* b grows its own tail */
    cr_assert_neq(b.blocks[3], a.blocks[3]);
    const sl_kv_table *all[] = { &a, &b, &c };
    cr_assert(sl_kv_blocks_check(&kv, all, 3));

    sl_kv_blocks_release(&kv, &a);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 12);           /* only a's own tail came back */
    cr_assert_eq(sl_kv_blocks_refcount(&kv, b.blocks[0]), 2);
    cr_assert(sl_kv_blocks_check(&kv, all, 3));
    sl_kv_blocks_release(&kv, &b);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 14);
    sl_kv_blocks_release(&kv, &c);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 16);
    cr_assert(sl_kv_blocks_check(&kv, all, 3));
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    sl_kv_blocks_table_fini(&c);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, share_refuses_bad_requests_unchanged)
{
    sl_kv_blocks kv;
    sl_kv_table a, b, small;
    cr_assert_eq(sl_kv_blocks_init(&kv, 16, 4), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &a, 32), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &b, 32), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &small, 4), SL_OK);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_share(&kv, &b, &a, 5), SL_ERANGE);     /* more than a holds */
    cr_assert_eq(sl_kv_blocks_share(&kv, &small, &a, 2), SL_ERANGE); /* more than it fits */
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &b, 1), SL_OK);
    cr_assert_eq(sl_kv_blocks_share(&kv, &b, &a, 1), SL_ESTATE);     /* not empty */
    cr_assert_eq(b.n_used, 1);
    cr_assert_eq(sl_kv_blocks_refcount(&kv, a.blocks[0]), 1);
    const sl_kv_table *all[] = { &a, &b, &small };
    cr_assert(sl_kv_blocks_check(&kv, all, 3));
    sl_kv_blocks_release(&kv, &a);
    sl_kv_blocks_release(&kv, &b);
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    sl_kv_blocks_table_fini(&small);
    sl_kv_blocks_fini(&kv);
}

Test(kv_blocks, check_catches_broken_accounting)
{
    sl_kv_blocks kv;
    sl_kv_table a;
    cr_assert_eq(sl_kv_blocks_init(&kv, 8, 4), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &a, 32), SL_OK);
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 8), SL_OK);
    const sl_kv_table *all[] = { &a };
    cr_assert(sl_kv_blocks_check(&kv, all, 1));
    cr_assert_not(sl_kv_blocks_check(&kv, all, 0));   /* a forgotten table */
    int32_t saved = a.blocks[1];
    a.blocks[1] = a.blocks[0];                         /* a slot naming the wrong block */
    cr_assert_not(sl_kv_blocks_check(&kv, all, 1));
    a.blocks[1] = 99;                                  /* out of range */
    cr_assert_not(sl_kv_blocks_check(&kv, all, 1));
    a.blocks[1] = saved;
    kv._ref[a.blocks[0]]++;                            /* a leaked reference */
    cr_assert_not(sl_kv_blocks_check(&kv, all, 1));
    kv._ref[a.blocks[0]]--;
    cr_assert(sl_kv_blocks_check(&kv, all, 1));
    sl_kv_blocks_release(&kv, &a);
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_fini(&kv);
}

/* ---------------------------------------------------------------- fuzz */

enum { FUZZ_TABLES = 6, FUZZ_BLOCKS = 40, FUZZ_BS = 8, FUZZ_CTX = 100 };

/* Random reserve/release/share against a model of the expected free count;
 * returns a hash of every id handed out, to compare two runs. */
static uint64_t fuzz_run(uint64_t seed, int steps)
{
    sl_kv_blocks kv;
    sl_kv_table t[FUZZ_TABLES];
    const sl_kv_table *all[FUZZ_TABLES];
    uint32_t tokens[FUZZ_TABLES] = { 0 };
    cr_assert_eq(sl_kv_blocks_init(&kv, FUZZ_BLOCKS, FUZZ_BS), SL_OK);
    for (int i = 0; i < FUZZ_TABLES; i++) {
        cr_assert_eq(sl_kv_blocks_table_init(&kv, &t[i], FUZZ_CTX), SL_OK);
        all[i] = &t[i];
    }
    uint64_t x = seed, hash = 1469598103934665603ull;
    int n_again = 0, n_range = 0, n_share = 0;
    for (int step = 0; step < steps; step++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int i = (int)(x % FUZZ_TABLES), op = (int)((x >> 8) % 10);
        uint32_t before = sl_kv_blocks_free_count(&kv);
        if (op < 6) {                                   /* grow: prefill chunk or decode */
            uint32_t n = tokens[i] + 1 + (uint32_t)((x >> 16) % 30);
            uint32_t need = sl_kv_blocks_needed(&kv, &t[i], n);
            sl_status rc = sl_kv_blocks_reserve(&kv, &t[i], n);
            if ((n + FUZZ_BS - 1) / FUZZ_BS > t[i].capacity) {   /* capacity is whole blocks */
                cr_assert_eq(rc, SL_ERANGE);
                n_range++;
                cr_assert_eq(sl_kv_blocks_free_count(&kv), before);
            } else if (need > before) {
                cr_assert_eq(rc, SL_AGAIN);
                n_again++;
                cr_assert_eq(sl_kv_blocks_free_count(&kv), before);
            } else {
                cr_assert_eq(rc, SL_OK);
                cr_assert_eq(sl_kv_blocks_free_count(&kv), before - need);
                tokens[i] = n;
                for (uint32_t k = 0; k < t[i].n_used; k++)
                    hash = (hash ^ (uint64_t)t[i].blocks[k]) * 1099511628211ull;
            }
        } else if (op < 8) {                            /* finish or preempt */
            sl_kv_blocks_release(&kv, &t[i]);
            tokens[i] = 0;
        } else {                                        /* prefix hit: share full blocks */
            int j = (int)((x >> 24) % FUZZ_TABLES);
            uint32_t full = tokens[j] / FUZZ_BS;
            if (j != i && t[i].n_used == 0 && full > 0) {
                cr_assert_eq(sl_kv_blocks_share(&kv, &t[i], &t[j], full), SL_OK);
                tokens[i] = full * FUZZ_BS;
                n_share++;
                cr_assert_eq(sl_kv_blocks_free_count(&kv), before);
            }
        }
        cr_assert(sl_kv_blocks_check(&kv, all, FUZZ_TABLES), "step %d", step);
    }
    for (int i = 0; i < FUZZ_TABLES; i++) {
        sl_kv_blocks_release(&kv, &t[i]);
        sl_kv_blocks_table_fini(&t[i]);
    }
    cr_assert_eq(sl_kv_blocks_free_count(&kv), FUZZ_BLOCKS);
    sl_kv_blocks_fini(&kv);
    cr_assert(n_again > 0 && n_range > 0 && n_share > 0, "paths hit: again %d range %d share %d",
              n_again, n_range, n_share);
    return hash;
}

Test(kv_blocks, fuzz_keeps_invariants_and_is_deterministic)
{
    for (uint64_t seed = 1; seed <= 5; seed++) {
        uint64_t h = fuzz_run(seed * 0x9e3779b97f4a7c15ull, 3000);
        cr_assert_eq(fuzz_run(seed * 0x9e3779b97f4a7c15ull, 3000), h);
    }
}

/* append and remove_slot: how the prefix cache holds blocks (a table used as
 * a set) and maps a cached block into a sequence's table. */
Test(kv_blocks, append_shares_a_held_block_and_remove_slot_drops_one_reference)
{
    sl_kv_blocks kv;
    sl_kv_table a, set;
    cr_assert_eq(sl_kv_blocks_init(&kv, 4, 16), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &a, 48), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&kv, &set, 32), SL_OK);   /* capacity 2 */
    cr_assert_eq(sl_kv_blocks_append(&kv, &set, 0), SL_ESTATE, "a free block cannot be shared");
    cr_assert_eq(sl_kv_blocks_append(&kv, &set, 9), SL_ESTATE, "nor one outside the pool");
    cr_assert_eq(sl_kv_blocks_reserve(&kv, &a, 48), SL_OK);   /* blocks 0, 1, 2 */
    cr_assert_eq(sl_kv_blocks_append(&kv, &set, a.blocks[0]), SL_OK);
    cr_assert_eq(sl_kv_blocks_append(&kv, &set, a.blocks[2]), SL_OK);
    cr_assert_eq(sl_kv_blocks_append(&kv, &set, a.blocks[1]), SL_ERANGE, "the set is full");
    cr_assert_eq(sl_kv_blocks_refcount(&kv, a.blocks[0]), 2);
    const sl_kv_table *both[2] = {&a, &set};
    cr_assert(sl_kv_blocks_check(&kv, both, 2));
    sl_kv_blocks_release(&kv, &a);
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 2, "the set still holds two");
    cr_assert_eq(sl_kv_blocks_remove_slot(&kv, &set, 0), 2, "the last slot moved into slot 0");
    cr_assert_eq(set.n_used, 1);
    cr_assert_eq(sl_kv_blocks_remove_slot(&kv, &set, 0), -1);
    cr_assert_eq(sl_kv_blocks_remove_slot(&kv, &set, 0), -1, "out of range: nothing");
    cr_assert_eq(sl_kv_blocks_free_count(&kv), 4);
    cr_assert(sl_kv_blocks_check(&kv, both, 2));
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&set);
    sl_kv_blocks_fini(&kv);
}
