/* kernels/cuda/profile.cuh: where a forward step's GPU time goes, by op.
 * Where:  created and destroyed with the backend (backend.cu), marked by
 *         the step (forward.cu), when the environment has
 *         SLUICE_CUDA_PROFILE=1 (off otherwise: every call below is a no-op
 *         on NULL).
 * How:    an event is recorded on the stream after each op group; after the
 *         step's synchronisation the gaps between consecutive events are
 *         added to their group. Events do not synchronise, so the figures
 *         are the GPU's own timeline (launch gaps included in the op that
 *         follows them). The totals go to stderr when the backend is
 *         destroyed, grouped by the step's token count class. Profiling
 *         turns CUDA graphs off (every launch is then visible). The host
 *         clock adds the wall time inside steps and between them (the
 *         worker's own work: scheduling, staging, delivering tokens). */
#ifndef SL_CUDA_PROFILE_CUH
#define SL_CUDA_PROFILE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

typedef enum {
    SL_PROF_EMBED, SL_PROF_NORM, SL_PROF_QKV, SL_PROF_ROPE, SL_PROF_ATTN, SL_PROF_WO, SL_PROF_GATE_UP,
    SL_PROF_DOWN, SL_PROF_ELTWISE, SL_PROF_OUTPUT, SL_PROF_COPY, SL_PROF_SAMPLE, SL_PROF_MOE_ROUTE, SL_PROF_KINDS
} sl_prof_kind;

typedef struct sl_cuda_profile sl_cuda_profile;

sl_cuda_profile *sl_cuda_profile_create_from_env(void);
void sl_cuda_profile_destroy(sl_cuda_profile *p);   /* prints the totals */
void sl_cuda_profile_begin(sl_cuda_profile *p, cudaStream_t st);
void sl_cuda_profile_mark(sl_cuda_profile *p, sl_prof_kind kind, cudaStream_t st);
/* After the step's synchronisation: accounts the step (T token rows). */
void sl_cuda_profile_end(sl_cuda_profile *p, int64_t T);

#endif
