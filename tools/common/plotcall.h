/* plotcall: runs homa-plot (tools/plot/homa-plot, python3 + matplotlib) on
 * a JSON file that a tool wrote, for the tools' --plot options.
 *
 * homa-plot is found at: $HOMA_PLOT (if set and not empty), next to the
 * running executable (/proc/self/exe), the source tree (HOMA_PLOT_SOURCE,
 * a compile definition), then on PATH.  It runs as a child process
 * (posix_spawn, no shell); failures come back as a message, never a crash.
 *
 * Shared by homa-sim and homa-perf; knows nothing about either. */
#ifndef HOMA_PLOTCALL_H
#define HOMA_PLOTCALL_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct plotcall_args {
    const char *json;          /* input: a JSON file of a libhoma tool */
    const char *out;           /* the figure: .png, .svg or .pdf */
    const char *kind;          /* homa-plot --kind; NULL = detected from the JSON */
    const char *figure;        /* homa-plot --figure; NULL = the kind's default */
    const char *title;         /* NULL = homa-plot's own */
    const char *const *labels; /* --label for each run in order; may be NULL */
    int nlabels;
};

/* Where homa-plot is: writes its path into buf (or "homa-plot" when only a
 * PATH search is left) and returns 0; -1 with a message in err when
 * $HOMA_PLOT names something that cannot be run. */
int plotcall_find(char *buf, size_t len, char *err, size_t errlen);

/* plotcall_run's result when homa-plot's optional dependencies are missing
 * (matplotlib cannot be imported, or its interpreter /usr/bin/python3 is not
 * there): nothing was drawn, but nothing went wrong either.  The tools warn
 * and keep their exit status: a missing plotting package must not turn a
 * successful measurement into a failure. */
#define PLOTCALL_SKIPPED 1

/* Runs homa-plot and waits for it.  Returns 0 when it drew the figure;
 * PLOTCALL_SKIPPED, with what is missing and how to install it in err, when
 * python3 or matplotlib is missing; -1 with a message in err otherwise
 * (homa-plot not found or not runnable, bad arguments, homa-plot failed:
 * its own message went to stderr). */
int plotcall_run(const struct plotcall_args *a, char *err, size_t errlen);

/* A fresh temporary file for a JSON to plot: its path goes into buf (at
 * least 64 bytes) and the open stream is returned, or NULL with errno set. */
FILE *plotcall_tmpjson(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
