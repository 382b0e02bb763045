/* tools/cudacheck/cudacheck.h: what the check's files share. */
#ifndef SL_TOOLS_CUDACHECK_H
#define SL_TOOLS_CUDACHECK_H

/* dlopens libsluice_cuda.so ($SLUICE_CUDA_LIB, else beside or above this
 * executable); NULL with a message on stderr. */
void *cudacheck_load_lib(void);

/* The device sampler against the reference sampler: returns the number of
 * failed cases, -1 when it could not run. */
int cudacheck_sampling(int draws);

#endif
