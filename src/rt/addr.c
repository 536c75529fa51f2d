/* Endpoint helpers: parsing "host:port" / "[v6]:port", formatting, and
 * conversion to and from struct sockaddr.  Every address is kept as IPv6
 * (IPv4 as IPv4-mapped) because the driver uses one dual-stack socket. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <homa/homa.h>

static void set_v4(homa_addr *a, const struct in_addr *in)
{
    memset(a->bytes, 0, 10);
    a->bytes[10] = 0xff;
    a->bytes[11] = 0xff;
    memcpy(a->bytes + 12, &in->s_addr, 4);
}

int homa_endpoint_is_ipv4(const homa_endpoint *ep)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(ep->addr.bytes, prefix, 12) == 0;
}

int homa_endpoint_equal(const homa_endpoint *a, const homa_endpoint *b)
{
    return a->port == b->port && memcmp(&a->addr, &b->addr, sizeof(a->addr)) == 0;
}

int homa_endpoint_from_host(const char *host, uint16_t port, homa_endpoint *out)
{
    if (host == NULL || out == NULL) return HOMA_ERR_ADDR;
    homa_endpoint ep;
    memset(&ep, 0, sizeof(ep));
    ep.port = port;
    struct in_addr a4;
    struct in6_addr a6;
    /* Numeric forms first: no resolver call, no surprises. */
    if (host[0] == '\0' || strcmp(host, "*") == 0) {
        *out = ep; /* wildcard */
        return 0;
    }
    if (inet_pton(AF_INET, host, &a4) == 1) {
        set_v4(&ep.addr, &a4);
        *out = ep;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        memcpy(ep.addr.bytes, &a6, 16);
        *out = ep;
        return 0;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) return HOMA_ERR_ADDR;
    /* Prefer IPv4: names like "localhost" resolve to both, and IPv4 is what
     * a peer that only listens on 0.0.0.0-style setups can always reach. */
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    if (pick == NULL)
        for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
            if (ai->ai_family == AF_INET6) {
                pick = ai;
                break;
            }
    int rc = HOMA_ERR_ADDR;
    if (pick != NULL) {
        uint16_t p = ep.port;
        rc = homa_endpoint_from_sockaddr(pick->ai_addr, pick->ai_addrlen, &ep);
        ep.port = p;
    }
    freeaddrinfo(res);
    if (rc == 0) *out = ep;
    return rc;
}

int homa_endpoint_parse(const char *str, homa_endpoint *out)
{
    if (str == NULL || out == NULL) return HOMA_ERR_ADDR;
    char host[256];
    const char *port_str = NULL;
    if (str[0] == '[') {
        const char *close = strchr(str, ']');
        if (close == NULL || (size_t)(close - str - 1) >= sizeof(host)) return HOMA_ERR_ADDR;
        memcpy(host, str + 1, (size_t)(close - str - 1));
        host[close - str - 1] = '\0';
        if (close[1] == ':')
            port_str = close + 2;
        else if (close[1] != '\0')
            return HOMA_ERR_ADDR;
    } else {
        const char *colon = strrchr(str, ':');
        /* More than one colon without brackets: a bare IPv6 address. */
        if (colon != NULL && strchr(str, ':') != colon) colon = NULL;
        size_t hlen = colon ? (size_t)(colon - str) : strlen(str);
        if (hlen >= sizeof(host)) return HOMA_ERR_ADDR;
        memcpy(host, str, hlen);
        host[hlen] = '\0';
        if (colon != NULL) port_str = colon + 1;
    }
    unsigned long port = 0;
    if (port_str != NULL) {
        char *end;
        if (*port_str < '0' || *port_str > '9') return HOMA_ERR_ADDR;
        port = strtoul(port_str, &end, 10);
        if (*end != '\0' || port > 65535) return HOMA_ERR_ADDR;
    }
    return homa_endpoint_from_host(host, (uint16_t)port, out);
}

int homa_endpoint_format(const homa_endpoint *ep, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    int n;
    if (homa_endpoint_is_ipv4(ep)) {
        inet_ntop(AF_INET, ep->addr.bytes + 12, a, sizeof(a));
        n = snprintf(buf, len, "%s:%u", a, ep->port);
    } else {
        inet_ntop(AF_INET6, ep->addr.bytes, a, sizeof(a));
        n = snprintf(buf, len, "[%s]:%u", a, ep->port);
    }
    if (n < 0 || (size_t)n >= len) return HOMA_ERR_INVAL;
    return n;
}

int homa_endpoint_from_sockaddr(const struct sockaddr *sa, size_t len, homa_endpoint *out)
{
    if (sa == NULL || out == NULL) return HOMA_ERR_ADDR;
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        set_v4(&out->addr, &s4->sin_addr);
        out->port = ntohs(s4->sin_port);
        return 0;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        memcpy(out->addr.bytes, &s6->sin6_addr, 16);
        out->port = ntohs(s6->sin6_port);
        return 0;
    }
    return HOMA_ERR_ADDR;
}

int homa_endpoint_to_sockaddr(const homa_endpoint *ep, struct sockaddr *sa, size_t len)
{
    if (ep == NULL || sa == NULL || len < sizeof(struct sockaddr_in6)) return HOMA_ERR_INVAL;
    struct sockaddr_in6 s6;
    memset(&s6, 0, sizeof(s6));
    s6.sin6_family = AF_INET6;
    s6.sin6_port = htons(ep->port);
    memcpy(&s6.sin6_addr, ep->addr.bytes, 16);
    memcpy(sa, &s6, sizeof(s6));
    return (int)sizeof(s6);
}
