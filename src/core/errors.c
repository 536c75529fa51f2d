/* Human-readable text for the HOMA_ERR_* codes. */
#include "homa/errors.h"

const char *homa_strerror(int err)
{
    /* A switch rather than a table indexed by -err: codes need not stay
     * dense, and any int (INT_MIN included) is safe to pass. */
    switch (err) {
    case HOMA_OK:
        return "success";
    case HOMA_ERR_INVAL:
        return "invalid argument or configuration value";
    case HOMA_ERR_NOMEM:
        return "out of memory or a configured memory cap was reached";
    case HOMA_ERR_AGAIN:
        return "nothing available now; try again later";
    case HOMA_ERR_TIMEOUT:
        return "the peer did not respond in time; the RPC was aborted";
    case HOMA_ERR_NOT_FOUND:
        return "no such RPC (unknown id or already completed)";
    case HOMA_ERR_MSGSIZE:
        return "message longer than the configured maximum";
    case HOMA_ERR_PORT_IN_USE:
        return "port already in use";
    case HOMA_ERR_NO_PORT:
        return "port not open";
    case HOMA_ERR_ABORTED:
        return "the RPC was aborted by the application";
    case HOMA_ERR_LIMIT:
        return "too many RPCs or ports (configured limit reached)";
    case HOMA_ERR_STATE:
        return "operation not valid in the RPC's current state";
    case HOMA_ERR_SHUTDOWN:
        return "the socket or engine is shutting down";
    case HOMA_ERR_IO:
        return "operating-system I/O error";
    case HOMA_ERR_ADDR:
        return "address could not be parsed or resolved";
    case HOMA_ERR_PERM:
        return "operation not permitted (homad's policy for this user and port, or raw sockets "
               "without CAP_NET_RAW: run as root, or setcap cap_net_raw+ep on the program)";
    case HOMA_ERR_UNREACHABLE:
        return "the peer is unreachable: the network answered ICMP unreachable (no Homa "
               "there, or no such port)";
    default:
        return "unknown error";
    }
}
