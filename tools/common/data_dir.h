/* Where an installed or build-tree tool finds libhoma's data/ (the workload
 * CDFs).  homa_workload_load() tries the tool's --data option and
 * $HOMA_DATA_DIR first; this picks its last resort, default_dir:
 *   1. source_dir, the source tree's data/ (compiled in for build-tree use;
 *      builds with HOMA_TOOLS_SOURCE_DATA=OFF, such as the Debian packages,
 *      compile in the installed path instead);
 *   2. <directory of the executable>/HOMA_EXE_TO_DATA_DIR, so that an install
 *      moved to another prefix still finds its own data;
 *   3. HOMA_INSTALL_DATA_DIR, the configured install path.
 * The first one that is a directory wins; otherwise the install path (or
 * NULL) is returned, so the error names where the data was expected.
 * Header-only so that homa-perf and homa-sim need no extra library. */
#ifndef HOMA_TOOLS_DATA_DIR_H
#define HOMA_TOOLS_DATA_DIR_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int homa_tool_is_dir(const char *path)
{
    struct stat st;
    return path && *path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* buf (len bytes) holds the result when it is built at run time; the
 * caller's buffer keeps this thread-safe. */
static inline const char *homa_tool_data_dir(const char *source_dir, char *buf, size_t len)
{
    if (homa_tool_is_dir(source_dir)) return source_dir;
#ifdef HOMA_EXE_TO_DATA_DIR
    if (buf && len > 0) {
        ssize_t n = readlink("/proc/self/exe", buf, len - 1);
        if (n > 0) {
            buf[n] = '\0';
            char *slash = strrchr(buf, '/');
            size_t used = slash ? (size_t)(slash - buf) + 1 : 0;
            int m = snprintf(buf + used, len - used, "%s", HOMA_EXE_TO_DATA_DIR);
            if (slash && m > 0 && (size_t)m < len - used && homa_tool_is_dir(buf)) {
                /* "/usr/share/libhoma" reads better in messages than
                 * "/usr/bin/../share/libhoma". */
                char real[PATH_MAX];
                if (realpath(buf, real) && strlen(real) < len) memcpy(buf, real, strlen(real) + 1);
                return buf;
            }
        }
    }
#endif
#ifdef HOMA_INSTALL_DATA_DIR
    return HOMA_INSTALL_DATA_DIR;
#else
    return NULL;
#endif
}

#endif
