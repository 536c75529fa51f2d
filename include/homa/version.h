/* libhoma version.
 *
 * The macros give the version of the headers an application was compiled
 * against; homa_version() and homa_version_string() give the version of the
 * library actually loaded, which can be newer (same SONAME, libhoma.so.0).
 * An application that needs a feature added in a minor release can check at
 * run time:
 *
 *     if (homa_version() < HOMA_VERSION_ENCODE(0, 2, 0)) ...
 *
 * These macros must match project(VERSION) in CMakeLists.txt; configuring
 * fails when they do not (docs/api.md, "ABI and versioning"). */
#ifndef HOMA_VERSION_H
#define HOMA_VERSION_H

#include <homa/export.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOMA_VERSION_MAJOR 0
#define HOMA_VERSION_MINOR 4
#define HOMA_VERSION_PATCH 0
#define HOMA_VERSION_STRING "0.4.0"

/* One number that orders versions: (major << 16) | (minor << 8) | patch.  No
 * cast, so that it also works in #if. */
#define HOMA_VERSION_ENCODE(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
#define HOMA_VERSION_NUMBER                                                                        \
    HOMA_VERSION_ENCODE(HOMA_VERSION_MAJOR, HOMA_VERSION_MINOR, HOMA_VERSION_PATCH)

/* The loaded library's version as HOMA_VERSION_NUMBER encodes it. */
HOMA_API unsigned homa_version(void);
/* The loaded library's version as "major.minor.patch" (static storage). */
HOMA_API const char *homa_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
