/* master/config_groups.h: the groups `sluice serve --help` prints the
 * settings in, and the check that every setting is in exactly one.
 * Where:     master only (config.c prints --help from it).
 * Ownership: static tables; nothing is allocated.
 * Errors:    sl_config_groups_check: SL_OK, or SL_EINVAL with err naming the
 *            first setting in no group (or in two), or a group's flag that
 *            names no setting. */
#ifndef SL_MASTER_CONFIG_GROUPS_H
#define SL_MASTER_CONFIG_GROUPS_H

#include <stddef.h>

#include "shared/status.h"

#define SL_CONFIG_GROUP_FLAGS_MAX 24   /* flags one group may list, its NULL end included */

typedef struct {
    const char *title;                              /* the heading --help prints ("Model") */
    const char *flags[SL_CONFIG_GROUP_FLAGS_MAX];   /* long flags without "--", most used first; NULL ends */
} sl_config_group;

/* --help's groups, in the order printed. */
extern const sl_config_group sl_config_groups[];
extern const size_t sl_config_n_groups;

/* Whether `groups` lists every setting of master/config.c's table exactly
 * once and nothing else (defined in config.c, which owns that table; the
 * unit test runs it over sl_config_groups). */
sl_status sl_config_groups_check(const sl_config_group *groups, size_t n_groups, char err[SL_ERR_LEN]);

#endif
