/* shared/build_info.h: facts about this build of sluice, fixed when it was
 * compiled: `sluice --version`, the `sluice_build_info` metric, the admin
 * socket's effective-config and responses' `system_fingerprint` all read
 * them, so they always agree.
 * Where:  any process; the definitions are generated at build time
 *         (cmake/build_info.cmake writes <build>/generated/build_info.c).
 * Values: version  the project's version (CMakeLists.txt `project(VERSION)`);
 *         commit   `git rev-parse --short=12 HEAD` of the source tree, with
 *                  "-dirty" when it had uncommitted changes, "unknown"
 *                  outside a git checkout;
 *         build_type  CMAKE_BUILD_TYPE (Release, RelWithDebInfo, ...);
 *         options  the build switches that change behaviour, space
 *                  separated ("cuda sanitize" or "" when none);
 *         cuda     true when the CUDA backend library was built beside the
 *                  binary (whether a GPU is present is a run-time matter). */
#ifndef SL_BUILD_INFO_H
#define SL_BUILD_INFO_H

#include <stdbool.h>

extern const char sl_build_version[];
extern const char sl_build_commit[];
extern const char sl_build_type[];
extern const char sl_build_options[];
extern const bool sl_build_cuda;

#endif
