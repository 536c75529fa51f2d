/* homa-perf: transport selection and server addresses. */
#include "perf.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/errors.h>

int perf_parse_addr(const char *spec, perf_addr *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    char host[256];
    const char *port_str;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':' || (size_t)(close - spec - 1) >= sizeof(host)) {
            snprintf(err, errlen, "bad address '%s' (want [V6ADDR]:PORT)", spec);
            return -1;
        }
        memcpy(host, spec + 1, (size_t)(close - spec - 1));
        host[close - spec - 1] = '\0';
        port_str = close + 2;
    } else {
        const char *colon = strrchr(spec, ':');
        if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host)) {
            snprintf(err, errlen, "bad address '%s' (want HOST:PORT)", spec);
            return -1;
        }
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = '\0';
        port_str = colon + 1;
    }
    char *end;
    unsigned long port = strtoul(port_str, &end, 10);
    if (*port_str == '\0' || *end != '\0' || port == 0 || port > 65535) {
        snprintf(err, errlen, "bad port in '%s'", spec);
        return -1;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    /* Prefer IPv4, as homa_endpoint_parse() does. */
    struct addrinfo *pick = res;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    memcpy(&out->ss, pick->ai_addr, pick->ai_addrlen);
    out->len = pick->ai_addrlen;
    freeaddrinfo(res);
    if (out->ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&out->ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&out->ss)->sin6_port = htons((uint16_t)port);
    snprintf(out->host, sizeof(out->host), "%s", host);
    out->port = (uint16_t)port;
    return 0;
}

int pt_client_create(const perf_opts *o, const perf_addr *addr, int conns, pt_client **out,
                     char *err, size_t errlen)
{
    if (o->proto == PERF_TCP)
        return tcp_client_create(addr, conns, (uint64_t)perf_busy_poll_us(o) * 1000, out, err,
                                 errlen);
    return homa_client_create(addr, o->busy_poll_us, out, err, errlen);
}

long perf_reply_size = -1;

int pt_server_start(const perf_opts *o, pt_server **out, char *err, size_t errlen)
{
    if (o->proto == PERF_TCP)
        return tcp_server_start(o->port, o->threads, (uint64_t)perf_busy_poll_us(o) * 1000, out,
                                err, errlen);
    return homa_server_start(o->port, o->threads, o->busy_poll_us, out, err, errlen);
}

const char *pt_strerror(int proto, int err)
{
    if (proto == PERF_HOMA && err < 0 && err >= -64) return homa_strerror(err);
    return strerror(err < 0 ? -err : err);
}

int perf_busy_poll_us(const perf_opts *o)
{
    if (o->busy_poll_us >= 0) return o->busy_poll_us;
    return o->proto == PERF_TCP ? 0 : homa_default_busy_poll_us();
}
