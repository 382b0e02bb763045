/* tests/unit/kernels/backend_select_test.c: kernels/backend.c's device
 * choice. The CUDA backend is a run-time library: "cuda" without it is a
 * clear error, "auto" without it (or without a GPU) runs on the CPU, and a
 * KV cache sized from device memory (0 blocks) needs CUDA. The library is
 * pointed at missing or broken files through SLUICE_CUDA_LIB, so these tests
 * never initialise CUDA, whatever the machine has. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"

/* Hyperparameters only: creating (not running) a CPU backend reads no weights. */
static sl_model tiny_model(void)
{
    sl_model m;
    memset(&m, 0, sizeof m);
    m.hp = (sl_hparams){.arch = SL_ARCH_LLAMA, .n_vocab = 8, .n_ctx_train = 64, .n_embd = 32, .n_layer = 1,
                        .n_head = 2, .n_head_kv = 1, .head_dim = 16, .n_ff = 64, .n_rot = 16, .norm_eps = 1e-5f,
                        .rope_freq_base = 10000.0f, .rope_freq_scale = 1.0f};
    return m;
}

static sl_backend_config config(const char *device, uint32_t blocks)
{
    return (sl_backend_config){.device = device, .n_threads = 1, .kv_block_size = 16, .n_kv_blocks = blocks,
                               .max_batch_tokens = 8, .max_ctx = 64};
}

Test(backend_select, cuda_without_library_is_a_clear_error)
{
    setenv("SLUICE_CUDA_LIB", "/nonexistent/libsluice_cuda.so", 1);
    sl_model m = tiny_model();
    sl_backend_config cfg = config("cuda", 4);
    sl_backend *b = (sl_backend *)&m;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_backend_create(&m, &cfg, &b, err), SL_EUNSUPPORTED);
    cr_assert_null(b);
    cr_assert(strstr(err, "SLUICE_CUDA_LIB") != NULL, "err: %s", err);
}

Test(backend_select, cuda_with_a_broken_library_names_the_load_error)
{
    char path[] = "/tmp/sluice-fake-cuda-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "not a library\n", 14), 14);
    close(fd);
    setenv("SLUICE_CUDA_LIB", path, 1);
    sl_model m = tiny_model();
    sl_backend_config cfg = config("cuda", 4);
    sl_backend *b;
    char err[SL_ERR_LEN] = "";
    sl_status rc = sl_backend_create(&m, &cfg, &b, err);
    unlink(path);
    cr_assert_eq(rc, SL_EUNSUPPORTED);
    cr_assert_null(b);
    cr_assert(strstr(err, "cannot load the CUDA backend") != NULL, "err: %s", err);
}

Test(backend_select, auto_without_library_runs_on_the_cpu)
{
    setenv("SLUICE_CUDA_LIB", "/nonexistent/libsluice_cuda.so", 1);
    sl_model m = tiny_model();
    sl_backend_config cfg = config("auto", 4);
    sl_backend *b;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_backend_create(&m, &cfg, &b, err), SL_OK, "err: %s", err);
    cr_assert_str_eq(b->ops->name, "cpu");
    sl_backend_destroy(b);

    cfg.device = NULL;   /* NULL means auto */
    cr_assert_eq(sl_backend_create(&m, &cfg, &b, err), SL_OK, "err: %s", err);
    cr_assert_str_eq(b->ops->name, "cpu");
    sl_backend_destroy(b);
}

Test(backend_select, zero_kv_blocks_needs_the_cuda_backend)
{
    setenv("SLUICE_CUDA_LIB", "/nonexistent/libsluice_cuda.so", 1);
    sl_model m = tiny_model();
    sl_backend *b;
    char err[SL_ERR_LEN] = "";
    sl_backend_config cfg = config("cpu", 0);
    cr_assert_eq(sl_backend_create(&m, &cfg, &b, err), SL_EINVAL);
    cr_assert_null(b);
    cfg = config("auto", 0);
    cr_assert_eq(sl_backend_create(&m, &cfg, &b, err), SL_EINVAL);
    cr_assert_null(b);
    cr_assert(strstr(err, "CUDA") != NULL, "err: %s", err);
}

Test(backend_select, unknown_device_is_rejected)
{
    sl_model m = tiny_model();
    sl_backend_config cfg = config("tpu", 4);
    sl_backend *b;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_backend_create(&m, &cfg, &b, err), SL_EINVAL);
    cr_assert_null(b);
    cr_assert(strstr(err, "tpu") != NULL, "err: %s", err);
}
