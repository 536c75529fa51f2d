/* libhoma error codes.
 *
 * One convention everywhere: functions return 0 (or a non-negative count) on
 * success and a negative HOMA_ERR_* value on failure.  homa_strerror() turns
 * any such value into a static, human-readable string. */
#ifndef HOMA_ERRORS_H
#define HOMA_ERRORS_H

#include <homa/export.h>

#ifdef __cplusplus
extern "C" {
#endif

enum homa_err {
    HOMA_OK = 0,
    HOMA_ERR_INVAL = -1,        /* an argument or configuration value is invalid */
    HOMA_ERR_NOMEM = -2,        /* memory allocation failed or a configured cap was hit */
    HOMA_ERR_AGAIN = -3,        /* nothing available now (non-blocking call) */
    HOMA_ERR_TIMEOUT = -4,      /* the peer was silent for too long; the RPC was aborted */
    HOMA_ERR_NOT_FOUND = -5,    /* no such RPC (unknown id, or already completed) */
    HOMA_ERR_MSGSIZE = -6,      /* message longer than the configured maximum */
    HOMA_ERR_PORT_IN_USE = -7,  /* the port is already open */
    HOMA_ERR_NO_PORT = -8,      /* the port is not open */
    HOMA_ERR_ABORTED = -9,      /* the RPC was aborted by the application */
    HOMA_ERR_LIMIT = -10,       /* too many RPCs or ports (configured limit) */
    HOMA_ERR_STATE = -11,       /* operation not valid in the RPC's state (e.g. second reply) */
    HOMA_ERR_SHUTDOWN = -12,    /* the socket or engine is closing */
    HOMA_ERR_IO = -13,          /* an operating-system I/O error (see errno-based detail) */
    HOMA_ERR_ADDR = -14,        /* address could not be parsed or resolved */
    HOMA_ERR_PERM = -15,        /* not permitted (homad policy; raw sockets need CAP_NET_RAW) */
    HOMA_ERR_UNREACHABLE = -16, /* the network reported the peer unreachable (ICMP) */
};

/* Returns a static description of err (any int; unknown values are named as such). */
HOMA_API const char *homa_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
