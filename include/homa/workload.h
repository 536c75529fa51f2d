/* libhoma workloads: message-size distributions for benchmarks and simulation.
 *
 * A workload is a discrete message-size distribution read from a CDF file:
 *
 *     # comment lines start with '#'; blank lines are ignored
 *     <bytes> <cumulative_fraction>
 *     ...
 *
 * Each data line is one possible message length; its probability is its
 * cumulative fraction minus the previous line's (the first line's fraction is
 * its own probability).  Lengths must be integers in [1, 2^31-1] and strictly
 * increasing; fractions must lie in [0, 1] and be strictly increasing (only the
 * first may be 0); the last fraction must be 1 within 1e-6 (it is then taken
 * as exactly 1).  The shipped files data/workloads/w1.cdf .. w5.cdf are the
 * W1..W5 workloads of the Homa papers.
 *
 * Nothing here draws random numbers: the caller passes a uniform u in [0, 1).
 *
 * "Truncation" (the max_size arguments) clamps every length above max_size to
 * max_size, like the Linux Homa benchmarks do with a 1,000,000-byte cap;
 * pass HOMA_WORKLOAD_NO_MAX (0) for the full distribution.
 *
 * Errors: negative HOMA_ERR_* values (homa/errors.h); after a failed load,
 * homa_workload_errmsg() describes the problem (file, line, reason).
 * A loaded workload is immutable, so it may be shared between threads. */
#ifndef HOMA_WORKLOAD_H
#define HOMA_WORKLOAD_H

#include <homa/export.h>

#include <stddef.h>
#include <stdint.h>

#include <homa/errors.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct homa_workload homa_workload;

/* max_size value meaning "no truncation". */
#define HOMA_WORKLOAD_NO_MAX 0u
/* The cap used by the Linux Homa benchmarks (turns W4/W5 into truncated workloads). */
#define HOMA_WORKLOAD_LINUX_MAX 1000000u
/* Largest accepted message length in a CDF file. */
#define HOMA_WORKLOAD_MAX_LENGTH 0x7fffffffu

/* Loads the CDF file at `path`.  On success stores a new workload in *out
 * (free it with homa_workload_free()) and returns 0.  Errors:
 *   HOMA_ERR_INVAL      bad argument, or the file is malformed or empty;
 *   HOMA_ERR_NOT_FOUND  the file does not exist;
 *   HOMA_ERR_IO         the file exists but could not be read;
 *   HOMA_ERR_NOMEM      allocation failed.
 * The workload's name is the file's base name without a ".cdf" suffix. */
HOMA_API int homa_workload_load_file(const char *path, homa_workload **out);

/* Loads a workload by name ("w1" .. "w5", or any other file stem; "W4" and
 * "w4.cdf" are accepted too).  A name containing '/' is treated as a path and
 * handed to homa_workload_load_file().  Otherwise the file <name>.cdf is looked
 * for, first in <dir>/workloads/ and then in <dir>/, where <dir> is tried in
 * this order, skipping NULL or empty ones:
 *   1. data_dir      (caller's choice, e.g. a command-line option);
 *   2. the environment variable HOMA_DATA_DIR;
 *   3. default_dir   (e.g. a path compiled into the program).
 * The first existing file wins.  Returns 0 or a negative HOMA_ERR_* as for
 * homa_workload_load_file(); HOMA_ERR_NOT_FOUND if no candidate exists (the
 * message lists where it looked). */
HOMA_API int homa_workload_load(const char *name, const char *data_dir, const char *default_dir,
                                homa_workload **out);

/* Message of the last failed load in the calling thread ("" after a
 * successful one or before any).  The string is valid until the next load in
 * the same thread. */
HOMA_API const char *homa_workload_errmsg(void);

/* Frees a workload; NULL is ignored. */
HOMA_API void homa_workload_free(homa_workload *w);

/* Name given at load time (e.g. "w4"). */
HOMA_API const char *homa_workload_name(const homa_workload *w);

/* Number of points (data lines) in the CDF. */
HOMA_API size_t homa_workload_points(const homa_workload *w);

/* Point i (0 <= i < homa_workload_points()): its length and cumulative
 * fraction.  Returns 0 or HOMA_ERR_INVAL if i is out of range.  Either output
 * pointer may be NULL. */
HOMA_API int homa_workload_point(const homa_workload *w, size_t i, uint32_t *bytes,
                                 double *fraction);

/* Smallest and largest length the distribution can produce (before truncation). */
HOMA_API uint32_t homa_workload_min_size(const homa_workload *w);
HOMA_API uint32_t homa_workload_max_size(const homa_workload *w);

/* Draws a length: the inverse CDF at u, a uniform value in [0, 1) supplied by
 * the caller (values outside are clamped into range).  If max_size is not
 * HOMA_WORKLOAD_NO_MAX, lengths above it are returned as max_size. */
HOMA_API uint32_t homa_workload_sample(const homa_workload *w, double u, uint32_t max_size);

/* Exact mean length in bytes, computed from the CDF, with lengths above
 * max_size counted as max_size (HOMA_WORKLOAD_NO_MAX: no truncation). */
HOMA_API double homa_workload_mean(const homa_workload *w, uint32_t max_size);

/* Quantile: the smallest length L with P(length <= L) >= p (p clamped to
 * [0, 1]), then clamped to max_size if that is set.  For the "shortest 10 %"
 * of a workload, messages with length <= homa_workload_quantile(w, 0.10, max)
 * are the short ones. */
HOMA_API uint32_t homa_workload_quantile(const homa_workload *w, double p, uint32_t max_size);

/* CDF: the fraction of messages with length <= bytes (0 below the smallest
 * length, 1 at or above the largest). */
HOMA_API double homa_workload_cdf(const homa_workload *w, uint32_t bytes);

#ifdef __cplusplus
}
#endif
#endif
