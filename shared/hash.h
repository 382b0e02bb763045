/* shared/hash.h: a 64-bit mixing function for hash tables and hash keys
 * (the tokenizer's pair map, the grammar's shared-mask keys).
 * Where:  any process; header only, no state.
 * What:   MurmurHash3's 64-bit finalizer: every input bit reaches every
 *         output bit, so the low bits of the result index a table well
 *         even when inputs differ only in their high bits. Not a
 *         cryptographic hash: keys an attacker controls must still be
 *         compared in full after a hash match. */
#ifndef SL_HASH_H
#define SL_HASH_H

#include <stdint.h>

static inline uint64_t sl_hash_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

#endif
