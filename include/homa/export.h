/* libhoma symbol export.
 *
 * The library is built with -fvisibility=hidden: only declarations marked
 * HOMA_API (the public API in include/homa/) are exported from libhoma.so,
 * so internal helpers cannot clash with an application's symbols.  The mark
 * is harmless in applications; defining HOMA_API before including a libhoma
 * header overrides it (e.g. empty, for a compiler without the attribute). */
#ifndef HOMA_EXPORT_H
#define HOMA_EXPORT_H

#ifndef HOMA_API
#if defined(__GNUC__) || defined(__clang__)
#define HOMA_API __attribute__((visibility("default")))
#else
#define HOMA_API
#endif
#endif

#endif
