/* cli/serve.c: `sluice serve`: checks the configuration and the model's
 * metadata up front (a bad flag, variable, model or template is one line and
 * exit status 2, which means "do not restart me"), then runs the master.
 * --tensor-parallel N > 1 is planned against the model (model/tp_plan.h) and
 * refused either way: the backends of this build drive one device. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "master/config.h"
#include "master/master.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/tp_plan.h"
#include "model/tokenizer.h"

int sl_cli_serve(int argc, char **argv)
{
    static sl_config cfg;
    char err[SL_ERR_LEN];
    sl_status rc = sl_config_parse(argc, argv, &cfg, err);
    if (rc == SL_AGAIN)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "sluice serve: %s\n", err);
        return SL_EXIT_CONFIG;
    }
    if (!cfg.model[0]) {
        const char *what;
        if (sl_cli_default_model(cfg.model, sizeof cfg.model, &what) < 0) {
            fprintf(stderr, "sluice serve: no -m given and the default model is missing (tools/setup.sh creates it)\n");
            return SL_EXIT_CONFIG;
        }
        fprintf(stderr, "sluice serve: no -m given: serving %s, %s\n", cfg.model, what);
    }
    /* metadata only: the file is mapped, weights are not read here */
    sl_model *m;
    sl_tokenizer *tok = NULL;
    if (sl_model_load(cfg.model, &m, err) < 0 || sl_tokenizer_create(m->gguf, &tok, err) < 0) {
        fprintf(stderr, "sluice serve: %s\n", err);
        return SL_EXIT_CONFIG;
    }
    if (cfg.tensor_parallel > 1) {
        /* Checked against the model first, so a model that cannot be split
         * says why; then refused, never ignored: no backend here runs a plan. */
        static sl_tp_plan plan;
        if (sl_tp_plan_for_model(&plan, m, (int32_t)cfg.tensor_parallel, err) < 0)
            fprintf(stderr, "sluice serve: %s cannot be split %u ways: %s\n", cfg.model, cfg.tensor_parallel, err);
        else
            fprintf(stderr,
                    "sluice serve: --tensor-parallel %u: tensor parallelism needs %u GPUs and the NCCL build; this "
                    "build drives one device\n", cfg.tensor_parallel, cfg.tensor_parallel);
        sl_tokenizer_destroy(tok);
        sl_model_destroy(m);
        return SL_EXIT_CONFIG;
    }
    int32_t n_ctx = m->hp.n_ctx_train;
    if (cfg.ctx_size && cfg.ctx_size < (uint32_t)n_ctx)
        n_ctx = (int32_t)cfg.ctx_size;
    else if (cfg.ctx_size > (uint32_t)n_ctx)
        fprintf(stderr, "sluice serve: --ctx-size %u is beyond the model's context %d; using %d\n", cfg.ctx_size,
                n_ctx, n_ctx);
    cfg.ctx_size = (uint32_t)n_ctx;
    if (!cfg.model_alias[0])
        snprintf(cfg.model_alias, sizeof cfg.model_alias, "%s", m->name);
    sl_tokenizer_destroy(tok);
    sl_model_destroy(m);
    return sl_master_run(&cfg, n_ctx);
}
