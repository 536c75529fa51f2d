/* The payload that fits the path to each peer (embedded backend).  The
 * runtime's max_payload follows the largest MTU of the host (loopback's
 * 65,536), so loopback peers get 64 KB packets, while a peer behind a
 * 1,500-byte link must get packets that fit it instead of IP fragments. */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/wire.h"
#include "rt/rt.h"

/* The payload for the MTU of the route to addr, as the kernel sees it
 * (connect() on a UDP socket sends nothing); 0 if it cannot be found.  The runtime's
 * max_payload follows the largest MTU of the host (loopback's 65,536), so
 * that loopback peers get 64 KB packets while a peer behind a 1,500-byte
 * link gets packets that fit it instead of IP fragments. */
static uint32_t path_probe(const homa_runtime *rt, const homa_addr *addr)
{
    homa_endpoint ep = {.addr = *addr, .port = 9};
    struct sockaddr_storage ss;
    socklen_t len;
    int v4 = homa_endpoint_is_ipv4(&ep);
    memset(&ss, 0, sizeof(ss));
    if (v4) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(9);
        memcpy(&s4->sin_addr, addr->bytes + 12, 4);
        len = sizeof(*s4);
    } else {
        len = (socklen_t)homa_endpoint_to_sockaddr(&ep, (struct sockaddr *)&ss, sizeof(ss));
    }
    int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int mtu = 0;
    socklen_t ml = sizeof(mtu);
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 ||
        getsockopt(fd, v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_MTU : IPV6_MTU, &mtu, &ml) != 0)
        mtu = 0;
    close(fd);
    if (mtu <= 0) return 0;
    if (rt->io != &homa_raw_ops) return homa_rt_payload_for_mtu((uint32_t)mtu);
    /* Over raw IP the family is known per peer: an IPv4 peer's packets
     * lose only 20 bytes to IP, as the kernel module's do (1,424 bytes of
     * payload at MTU 1500). */
    return homa_rt_raw_payload_for_mtu((uint32_t)mtu + (v4 ? 20u : 0u));
}

/* The engine asks homa_engine_ops.path_payload when it first meets a peer,
 * with rt->lock held, and finding the path MTU takes system calls, which
 * must not run under the lock.  So the runtime probes a peer's path before
 * each engine call that may meet a new peer (a request's destination, a
 * DATA packet's source), dropping the lock for the probe, and
 * rt_path_payload only reads this cache.  Two threads may probe the same
 * peer at once: the later insert finds the entry and overwrites it.  An
 * entry older than PATH_TTL_NS is still answered but probed again by the
 * next path_prepare (routes change).  A peer that is not cached (evicted
 * between probe and use, only with more than PATH_WAYS new peers per set
 * in that window) gets cfg.max_payload, as when a probe fails. */
#define PATH_SETS 256
#define PATH_WAYS 4
#define PATH_TTL_NS (10ull * 1000000000ull)

struct path_entry {
    homa_addr addr;
    uint32_t payload; /* path_probe's answer (0: unknown) */
    int valid;
    uint64_t probed; /* now_ns() of the probe */
};

/* All of the path_* functions: rt->lock held. */
static struct path_entry *path_set(homa_runtime *rt, const homa_addr *a)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof(a->bytes); i++)
        h = (h ^ a->bytes[i]) * 16777619u;
    return &rt->paths[(h % PATH_SETS) * PATH_WAYS];
}

static struct path_entry *path_find(homa_runtime *rt, const homa_addr *a)
{
    struct path_entry *set = path_set(rt, a);
    for (int i = 0; i < PATH_WAYS; i++)
        if (set[i].valid && memcmp(&set[i].addr, a, sizeof(*a)) == 0) return &set[i];
    return NULL;
}

static void path_insert(homa_runtime *rt, const homa_addr *a, uint32_t payload, uint64_t now)
{
    rt->path_last_until = 0; /* an insert may evict the memo's entry */
    struct path_entry *e = path_find(rt, a);
    if (e == NULL) {
        struct path_entry *set = path_set(rt, a);
        e = &set[0];
        for (int i = 0; i < PATH_WAYS && e->valid; i++)
            if (!set[i].valid || set[i].probed < e->probed) e = &set[i];
        e->addr = *a;
        e->valid = 1;
    }
    e->payload = payload;
    e->probed = now;
}

/* Makes sure addr's path is cached (and fresh).  Drops rt->lock around a
 * probe: the caller must not rely on what it read under the lock before. */
void rt_path_prepare(homa_runtime *rt, const homa_addr *addr, uint64_t now)
{
    if (rt->paths == NULL) return;
    const struct path_entry *e = path_find(rt, addr);
    if (e != NULL && now - e->probed < PATH_TTL_NS) return;
    homa_addr a = *addr;
    pthread_mutex_unlock(&rt->lock);
    uint32_t payload = path_probe(rt, &a);
    pthread_mutex_lock(&rt->lock);
    path_insert(rt, &a, payload, now);
}

/* The same for the source of a received packet (avail of its len bytes at
 * pkt): only a DATA packet can make the engine meet a new peer, and only
 * such a packet from an uncached source is worth a probe. */
void rt_path_prepare_rx(homa_runtime *rt, const homa_addr *src, const uint8_t *pkt, size_t avail,
                        size_t len, uint64_t now)
{
    if (rt->paths == NULL) return;
    /* Packets come in runs from one peer: the last one checked is fresh
     * until its entry's probe gets old (no hashing per packet). */
    if (now < rt->path_last_until && memcmp(src, &rt->path_last, sizeof(*src)) == 0) return;
    const struct path_entry *e = path_find(rt, src);
    if (e != NULL && now - e->probed < PATH_TTL_NS) {
        rt->path_last = *src;
        rt->path_last_until = e->probed + PATH_TTL_NS;
        return;
    }
    struct homa_wire_pkt w;
    if (homa_wire_decode_hdr(pkt, avail, len, &w) != HOMA_WIRE_OK || w.type != HOMA_PKT_DATA)
        return;
    rt_path_prepare(rt, src, now);
}

/* homa_engine_ops.path_payload: the largest payload for the path to addr
 * (path_prepare probed it); 0, for cfg.max_payload, if it is not cached. */
uint32_t rt_path_payload(void *ctx, const homa_addr *addr)
{
    homa_runtime *rt = ctx;
    const struct path_entry *e = path_find(rt, addr);
    return e != NULL ? e->payload : 0;
}

int rt_path_init(homa_runtime *rt)
{
    rt->paths = calloc(PATH_SETS * PATH_WAYS, sizeof(*rt->paths));
    return rt->paths != NULL ? 0 : HOMA_ERR_NOMEM;
}
