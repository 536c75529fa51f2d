/* libnccl-net-homa: an NCCL network plugin on the public libhoma API.
 *
 * Design (docs/nccl.md has the long version):
 *   - one libhoma runtime and one Homa socket per process, shared by every
 *     comm; a global mutex serialises the plugin's state;
 *   - a listen handle carries the listener's address, Homa port and listen
 *     id; connect sends a HELLO RPC, the listener answers it with the id of
 *     a new receive comm, which accept() then hands out;
 *   - each isend is one Homa RPC (header: receive comm id, sequence number,
 *     tag, size; then the payload).  The receiver matches sequence k with
 *     its k-th irecv and replies once the bytes are in the posted buffer, so
 *     a send completes when the data is delivered and a sender never has
 *     more than `window` messages in flight (the receiver's buffering for
 *     early messages is bounded by that);
 *   - requests of a comm are reported done in posting order;
 *   - progress is made in every call (homa_recv non-blocking): nothing
 *     blocks. */
#include "homa_net.h"
#include "tcmap.h"

#include <homa/homa.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define HN_MAGIC 0x4c434e48u /* "HNCL" */
#define HN_VERSION 1
#define HN_MAX_DEVS 16
#define HN_MAX_WINDOW 256
#define HN_MAX_COMMS 65535
#define HN_HDR_LEN 40
#define HN_REPLY_LEN 16
#define HN_PROGRESS_BATCH 256

enum { HN_MSG_HELLO = 1, HN_MSG_DATA = 2 };
enum { HN_OK = 0, HN_NO_COMM = 1, HN_TRUNCATED = 2, HN_BAD_TAG = 3, HN_BAD_SEQ = 4 };
enum { HN_LISTEN = 1, HN_SEND = 2, HN_RECV = 3 };
enum { HN_CONNECTING = 1, HN_CONNECTED = 2, HN_FAILED = 3 };
enum { HN_FREE = 0, HN_POSTED = 1, HN_DONE = 2 };

#define HN_HELLO_SEQ 0xffffffffu /* cookie sequence of a HELLO RPC */

struct hn_comm;

typedef struct hn_req {
    struct hn_comm *comm;
    uint64_t seq;
    int state;
    ncclResult_t error;
    void *data;
    size_t size; /* posted size; the received size once done */
    int tag;
} hn_req;

typedef struct hn_comm {
    int type;
    uint32_t id;
    int dev;
    int state;          /* send comms: HN_CONNECTING... */
    homa_endpoint peer; /* send: the listener; recv: the sender */
    uint32_t remote_id; /* send: the peer's receive comm */
    uint32_t listen_id; /* recv: the listen comm it came through */
    uint32_t window;
    uint64_t next_seq;  /* next request to post */
    uint64_t done_upto; /* every request below this one is done */
    hn_req reqs[HN_MAX_WINDOW];
    /* recv: messages that arrived before their irecv, by seq % window */
    homa_msg early[HN_MAX_WINDOW];
    uint64_t early_seq[HN_MAX_WINDOW];
    uint8_t early_valid[HN_MAX_WINDOW];
    /* send: messages not yet acknowledged, by seq % window; a slot is only
     * reused once acknowledged, which is what bounds the receiver's early
     * messages */
    uint8_t unacked[HN_MAX_WINDOW];
    ncclResult_t error; /* send: a failure acknowledged after its request was done */
    unsigned send_flags; /* send: HOMA_SEND_PRIO of its traffic class, or 0 */
    /* listen: receive comms waiting for accept(), in arrival order */
    struct hn_comm *accept_head, *accept_tail;
    struct hn_comm *accept_next;
    int accepted;
} hn_comm;

typedef struct hn_dev {
    char name[IF_NAMESIZE + HOMA_ENDPOINT_STRLEN + 2];
    char ifname[IF_NAMESIZE];
    homa_endpoint ep;
    int speed;
    uint64_t guid;
} hn_dev;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int inited;
    ncclResult_t init_rc;
    ncclDebugLogger_t log;
    homa_runtime *rt;
    homa_socket *sock;
    uint16_t port;
    hn_dev devs[HN_MAX_DEVS];
    int ndevs;
    hn_comm **comms; /* by id & 0xffff */
    uint32_t comms_cap;
    uint32_t next_idx;
    uint16_t gen;
    uint32_t window;
    size_t max_bytes;
    int eager;          /* a send is done once libhoma holds its copy */
    uint32_t live;      /* comms open */
    uint64_t linger_ns; /* the last close waits this long for replies' acks */
    hn_tcmap tcmap;     /* NCCL_HOMA_TC_PRIO */
} g;

#define LOG(level, ...)                                                                            \
    do {                                                                                           \
        if (g.log)                                                                                 \
            g.log(level, NCCL_NET | NCCL_INIT, __FILE__, __LINE__, __VA_ARGS__);                   \
        else if (level == NCCL_LOG_WARN || getenv("NCCL_HOMA_DEBUG"))                              \
            hn_stderr(__VA_ARGS__);                                                                \
    } while (0)
#define WARN(...) LOG(NCCL_LOG_WARN, __VA_ARGS__)
#define INFO(...) LOG(NCCL_LOG_INFO, __VA_ARGS__)

static void hn_stderr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("NET/Homa: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- little-endian wire fields --------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- configuration ---------------------------------------------------- */

/* Reads an unsigned NCCL_HOMA_* variable; 0 = unset (def), 1 = set, -1 =
 * malformed or out of [lo, hi] (logged). */
static int env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-' || x < lo || x > hi) {
        WARN("%s=\"%s\": expected an integer in [%llu, %llu]", name, v, (unsigned long long)lo,
             (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 1;
}

/* ---- comm table ------------------------------------------------------- */

static hn_comm *comm_lookup(uint32_t id, int type)
{
    uint32_t idx = id & 0xffffu;
    if (idx == 0 || idx >= g.comms_cap) return NULL;
    hn_comm *c = g.comms[idx];
    if (!c || c->id != id || c->type != type) return NULL;
    return c;
}

static hn_comm *comm_new(int type, int dev)
{
    if (!g.comms) {
        g.comms_cap = HN_MAX_COMMS + 1;
        g.comms = calloc(g.comms_cap, sizeof(*g.comms));
        if (!g.comms) return NULL;
        g.next_idx = 1;
    }
    /* Slot 0 is never used so that id 0 can mean "none". */
    uint32_t idx = 0;
    for (uint32_t n = 0; n < HN_MAX_COMMS; n++) {
        uint32_t i = g.next_idx;
        g.next_idx = g.next_idx % HN_MAX_COMMS + 1;
        if (!g.comms[i]) {
            idx = i;
            break;
        }
    }
    if (!idx) return NULL;
    hn_comm *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    /* A generation in the upper bits keeps a closed comm's id from
     * matching its slot's next occupant. */
    if (++g.gen == 0) g.gen = 1;
    c->id = ((uint32_t)g.gen << 16) | idx;
    c->type = type;
    c->dev = dev;
    c->window = g.window;
    for (int i = 0; i < HN_MAX_WINDOW; i++)
        c->reqs[i].comm = c;
    g.comms[idx] = c;
    g.live++;
    return c;
}

static void comm_free(hn_comm *c)
{
    g.comms[c->id & 0xffffu] = NULL;
    g.live--;
    free(c);
}

/* ---- devices ---------------------------------------------------------- */

static int read_speed(const char *ifname)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int s = 0;
    /* Virtual links (loopback, veth) fail the read or report -1. */
    if (fscanf(f, "%d", &s) != 1) s = 0;
    fclose(f);
    return s > 0 ? s : 0;
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int sockaddr_endpoint(const struct sockaddr *sa, homa_endpoint *ep)
{
    if (!sa) return -1;
    size_t len = sa->sa_family == AF_INET    ? sizeof(struct sockaddr_in)
                 : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : 0;
    if (!len) return -1;
    return homa_endpoint_from_sockaddr(sa, len, ep) == 0 ? 0 : -1;
}

static void add_dev(const char *ifname, const homa_endpoint *ep, int speed_cfg)
{
    if (g.ndevs >= HN_MAX_DEVS) return;
    hn_dev *d = &g.devs[g.ndevs];
    memset(d, 0, sizeof(*d));
    snprintf(d->ifname, sizeof(d->ifname), "%s", ifname ? ifname : "");
    d->ep = *ep;
    d->ep.port = 0;
    char addr[HOMA_ENDPOINT_STRLEN];
    homa_endpoint_format(&d->ep, addr, sizeof(addr));
    char *colon = strrchr(addr, ':');
    if (colon) *colon = '\0';
    char ifn[IF_NAMESIZE];
    memcpy(ifn, d->ifname, sizeof(ifn));
    snprintf(d->name, sizeof(d->name), "%s%s%s", ifn, ifn[0] ? "/" : "", addr);
    int s = d->ifname[0] ? read_speed(d->ifname) : 0;
    d->speed = s ? s : speed_cfg;
    d->guid = fnv1a(&d->ep.addr, sizeof(d->ep.addr)) ^ (uint64_t)g.ndevs;
    g.ndevs++;
}

/* The interface that owns an address (for its speed), or "". */
static void ifname_of(const homa_endpoint *ep, char *out, size_t len)
{
    out[0] = '\0';
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        homa_endpoint e;
        if (sockaddr_endpoint(i->ifa_addr, &e) != 0) continue;
        e.port = 0;
        homa_endpoint a = *ep;
        a.port = 0;
        if (homa_endpoint_equal(&a, &e)) {
            snprintf(out, len, "%s", i->ifa_name);
            break;
        }
    }
    freeifaddrs(ifs);
}

static int find_devices(int speed_cfg)
{
    const char *addrs = getenv("NCCL_HOMA_ADDRS");
    if (addrs && *addrs) {
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s", addrs);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            homa_endpoint ep;
            if (homa_endpoint_from_host(tok, 0, &ep) != 0) {
                WARN("NCCL_HOMA_ADDRS: cannot use address \"%s\"", tok);
                return -1;
            }
            char ifn[IF_NAMESIZE];
            ifname_of(&ep, ifn, sizeof(ifn));
            add_dev(ifn, &ep, speed_cfg);
        }
        return 0;
    }
    /* One device per interface that is up, IPv4 first (as NCCL's socket
     * transport); loopback only when there is nothing else, or when
     * NCCL_HOMA_IFNAME names it. */
    const char *want = getenv("NCCL_HOMA_IFNAME");
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return -1;
    for (int pass = 0; pass < 3 && g.ndevs == 0; pass++) {
        for (int fam = 0; fam < 2; fam++) {
            for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
                if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
                if (i->ifa_addr->sa_family != (fam == 0 ? AF_INET : AF_INET6)) continue;
                int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
                if (want && *want) {
                    if (strncmp(i->ifa_name, want, strlen(want)) != 0) continue;
                } else if (lo != (pass == 1)) {
                    continue;
                }
                if (pass == 2) continue;
                homa_endpoint ep;
                if (sockaddr_endpoint(i->ifa_addr, &ep) != 0) continue;
                /* Link-local IPv6 needs a scope id that a handle cannot
                 * carry across hosts. */
                if (fam == 1 && ep.addr.bytes[0] == 0xfe && (ep.addr.bytes[1] & 0xc0) == 0x80)
                    continue;
                int dup = 0;
                for (int k = 0; k < g.ndevs; k++)
                    if (!strcmp(g.devs[k].ifname, i->ifa_name)) dup = 1;
                if (!dup) add_dev(i->ifa_name, &ep, speed_cfg);
            }
        }
        if (want && *want) break;
    }
    freeifaddrs(ifs);
    return 0;
}

/* ---- init ------------------------------------------------------------- */

static ncclResult_t do_init(void)
{
    uint64_t v;
    int bad = 0;
    uint64_t speed = 10000, port = 0, window = 64, max_msg = 16u << 20, linger_ms = 1000;
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    o.config.max_rx_bytes = 1ull << 30;
    /* NCCL treats a failed transfer as fatal and its socket transport rides
     * out long stalls (TCP): wait 10 s of silence, not Homa's 100 ms, before
     * giving up on a peer (an overloaded host can stall that long). */
    o.config.timeout_ticks = 10000;
    bad |= env_u64("NCCL_HOMA_SPEED", 1, 100000000, &speed) < 0;
    bad |= env_u64("NCCL_HOMA_PORT", 0, 65535, &port) < 0;
    bad |= env_u64("NCCL_HOMA_WINDOW", 1, HN_MAX_WINDOW, &window) < 0;
    bad |= env_u64("NCCL_HOMA_MAX_BYTES", 1, 0x7fffffffu - HN_HDR_LEN, &max_msg) < 0;
    bad |= env_u64("NCCL_HOMA_LINGER_MS", 0, 600000, &linger_ms) < 0;
    /* Engine settings: each variable, when set, replaces the default. */
    int r;
    if ((r = env_u64("NCCL_HOMA_MTU", 1280, 65536, &v)) > 0) o.mtu = (uint32_t)v;
    bad |= r < 0;
    if ((r = env_u64("NCCL_HOMA_BUSY_POLL_US", 0, 1000000, &v)) > 0) o.busy_poll_us = (uint32_t)v;
    bad |= r < 0;
    if ((r = env_u64("NCCL_HOMA_LINK_MBPS", 1, 100000000, &v)) > 0) o.link_bps = v * 1000000;
    bad |= r < 0;
    if ((r = env_u64("NCCL_HOMA_UNSCHED_BYTES", 1, 0x7fffffff, &v)) > 0)
        o.config.unsched_bytes = (uint32_t)v;
    bad |= r < 0;
    if ((r = env_u64("NCCL_HOMA_MAX_RX_BYTES", 1 << 20, UINT64_MAX, &v)) > 0)
        o.config.max_rx_bytes = v;
    bad |= r < 0;
    if ((r = env_u64("NCCL_HOMA_TIMEOUT_TICKS", 10, 1000000, &v)) > 0)
        o.config.timeout_ticks = (uint32_t)v;
    bad |= r < 0;
    const char *faults = getenv("NCCL_HOMA_FAULTS");
    if (faults && *faults) {
        char err[128];
        if (homa_faults_parse(faults, &o.faults, err, sizeof(err)) != 0) {
            WARN("NCCL_HOMA_FAULTS=\"%s\": %s", faults, err);
            bad = 1;
        }
    }
    const char *sd = getenv("NCCL_HOMA_SEND_DONE");
    g.eager = 1;
    if (sd && *sd) {
        if (!strcmp(sd, "delivered"))
            g.eager = 0;
        else if (strcmp(sd, "copied") != 0) {
            WARN("NCCL_HOMA_SEND_DONE=\"%s\": expected copied or delivered", sd);
            bad = 1;
        }
    }
    const char *tcp = getenv("NCCL_HOMA_TC_PRIO");
    if (tcp && *tcp) {
        char err[128];
        if (hn_tcmap_parse(tcp, (int)o.config.num_priorities, &g.tcmap, err, sizeof(err)) != 0) {
            WARN("NCCL_HOMA_TC_PRIO=\"%s\": %s", tcp, err);
            bad = 1;
        }
    }
    if (bad) return ncclInvalidArgument;
    o.config.max_message_length = (uint32_t)(max_msg + HN_HDR_LEN);
    g.window = (uint32_t)window;
    g.max_bytes = (size_t)max_msg;
    g.linger_ns = linger_ms * 1000000ull;

    if (find_devices((int)speed) != 0) return ncclSystemError;
    if (g.ndevs == 0) {
        WARN("no usable network interface (set NCCL_HOMA_ADDRS or NCCL_HOMA_IFNAME)");
        return ncclSystemError;
    }
    int rc = homa_runtime_create(&o, &g.rt);
    if (rc != 0) {
        WARN("homa_runtime_create: %s", homa_strerror(rc));
        return rc == HOMA_ERR_INVAL ? ncclInvalidArgument : ncclSystemError;
    }
    rc = homa_socket_open(g.rt, (uint16_t)port, &g.sock);
    if (rc != 0) {
        WARN("homa_socket_open(port %u): %s", (unsigned)port, homa_strerror(rc));
        homa_runtime_destroy(g.rt);
        g.rt = NULL;
        return ncclSystemError;
    }
    g.port = homa_socket_port(g.sock);
    for (int i = 0; i < g.ndevs; i++) {
        g.devs[i].ep.port = g.port;
        INFO("NET/Homa: device %d %s speed %d Mbps port %u", i, g.devs[i].name, g.devs[i].speed,
             g.port);
    }
    return ncclSuccess;
}

ncclResult_t hn_init(ncclDebugLogger_t log)
{
    pthread_mutex_lock(&g_lock);
    if (log) g.log = log;
    if (!g.inited) {
        g.init_rc = do_init();
        g.inited = 1;
    }
    ncclResult_t rc = g.init_rc;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static int ready(void)
{
    return g.inited && g.init_rc == ncclSuccess;
}

ncclResult_t hn_devices(int *ndev)
{
    if (!ndev) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ready() ? ncclSuccess : ncclInvalidUsage;
    *ndev = ready() ? g.ndevs : 0;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

ncclResult_t hn_get_props(int dev, hn_props *out)
{
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ncclSuccess;
    if (!ready())
        rc = ncclInvalidUsage;
    else if (!out || dev < 0 || dev >= g.ndevs)
        rc = ncclInvalidArgument;
    else {
        out->name = g.devs[dev].name;
        out->pci_path = NULL;
        out->guid = g.devs[dev].guid;
        out->speed_mbps = g.devs[dev].speed;
        out->latency_us = 0;
        out->max_comms = HN_MAX_COMMS;
        out->max_recvs = 1;
        out->max_bytes = g.max_bytes;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ---- progress --------------------------------------------------------- */

static void reply_status(const homa_msg *m, int status, uint64_t a)
{
    uint8_t r[HN_REPLY_LEN] = {0};
    put32(r, HN_MAGIC);
    r[4] = (uint8_t)status;
    put64(r + 8, a);
    int rc = homa_reply_msg(g.sock, m, r, sizeof(r));
    if (rc != 0) WARN("homa_reply: %s", homa_strerror(rc));
}

static ncclResult_t status_error(int status)
{
    switch (status) {
    case HN_OK:
        return ncclSuccess;
    case HN_TRUNCATED:
    case HN_BAD_TAG:
    case HN_BAD_SEQ:
        return ncclInvalidUsage;
    default:
        return ncclRemoteError;
    }
}

/* Puts early message m (seq-th of c) into irecv r; replies and releases. */
static void deliver(hn_comm *c, hn_req *r, homa_msg *m)
{
    const uint8_t *h = m->data;
    size_t len = (size_t)get64(h + 24);
    int tag = (int)get32(h + 20);
    int status = HN_OK;
    if (len > r->size) {
        WARN("receive %llu on comm %u: %zu bytes sent, %zu posted", (unsigned long long)r->seq,
             c->id, len, r->size);
        status = HN_TRUNCATED;
    } else if (tag != r->tag) {
        WARN("receive %llu on comm %u: tag %d sent, %d posted", (unsigned long long)r->seq, c->id,
             tag, r->tag);
        status = HN_BAD_TAG;
    } else {
        if (len) memcpy(r->data, h + HN_HDR_LEN, len);
        r->size = len;
    }
    r->error = status_error(status);
    r->state = HN_DONE;
    reply_status(m, status, len);
    homa_release(g.sock, m);
}

static void handle_hello(homa_msg *m)
{
    const uint8_t *h = m->data;
    uint32_t lid = get32(h + 8);
    uint32_t sid = get32(h + 12);
    uint32_t win = get32(h + 16);
    hn_comm *l = comm_lookup(lid, HN_LISTEN);
    hn_comm *c = l && win >= 1 ? comm_new(HN_RECV, l->dev) : NULL;
    if (!c) {
        reply_status(m, HN_NO_COMM, 0);
        homa_release(g.sock, m);
        return;
    }
    homa_msg_peer(m, &c->peer);
    c->remote_id = sid;
    c->listen_id = lid;
    c->state = HN_CONNECTED;
    if (win < c->window) c->window = win;
    if (l->accept_tail)
        l->accept_tail->accept_next = c;
    else
        l->accept_head = c;
    l->accept_tail = c;
    reply_status(m, HN_OK, ((uint64_t)c->window << 32) | c->id);
    homa_release(g.sock, m);
}

static void handle_data(homa_msg *m)
{
    const uint8_t *h = m->data;
    hn_comm *c = comm_lookup(get32(h + 8), HN_RECV);
    uint64_t seq = get64(h + 12);
    if (!c || m->length - HN_HDR_LEN != get64(h + 24)) {
        reply_status(m, c ? HN_BAD_SEQ : HN_NO_COMM, 0);
        homa_release(g.sock, m);
        return;
    }
    /* The sender sends seq only once every seq <= seq - window was
     * delivered, so the early messages of a comm have distinct slots; a
     * taken slot means a broken peer, refused rather than trusted. */
    uint32_t slot = (uint32_t)(seq % c->window);
    if (c->early_valid[slot]) {
        reply_status(m, HN_BAD_SEQ, 0);
        homa_release(g.sock, m);
        return;
    }
    hn_req *r = &c->reqs[slot];
    if (r->state == HN_POSTED && r->seq == seq) {
        deliver(c, r, m);
        return;
    }
    c->early[slot] = *m;
    c->early_seq[slot] = seq;
    c->early_valid[slot] = 1;
}

/* Appends " name=value" to line (cap bytes, *used of them taken, always
 * terminated) for a counter that is not zero, while there is room. */
static void counter_append(char *line, size_t cap, size_t *used, const char *name, uint64_t v)
{
    if (v == 0 || *used + 64 > cap) return;
    int n = snprintf(line + *used, cap - *used, " %s=%llu", name, (unsigned long long)v);
    if (n > 0) *used += (size_t)n < cap - *used ? (size_t)n : cap - 1 - *used;
}

static void handle_response(int rc, homa_msg *m)
{
    uint32_t cid = (uint32_t)(m->cookie >> 32);
    uint32_t seq32 = (uint32_t)m->cookie;
    hn_comm *c = comm_lookup(cid, HN_SEND);
    int status = HN_NO_COMM;
    uint64_t arg = 0;
    if (rc == 0 && m->length >= HN_REPLY_LEN && get32(m->data) == HN_MAGIC) {
        status = m->data[4];
        arg = get64(m->data + 8);
    }
    if (rc != 0) {
        WARN("RPC to the peer of comm %u failed: %s", cid, homa_strerror(rc));
        /* NCCL aborts on the first failure: leave the engine's view of
         * it (restarts, timeouts, drops) where NCCL_DEBUG=INFO shows it. */
        homa_counters ec;
        homa_runtime_counters(g.rt, &ec, NULL);
        char line[2048];
        size_t used = 0;
        line[0] = 0;
        /* Field by field, by name: HOMA_COUNTER_LIST is what declares them. */
#define HN_COUNTER(name, desc) counter_append(line, sizeof(line), &used, #name, ec.name);
        HOMA_COUNTER_LIST(HN_COUNTER)
#undef HN_COUNTER
        INFO("NET/Homa: engine counters:%s", line);
    }
    if (c && seq32 == HN_HELLO_SEQ && c->state == HN_CONNECTING) {
        if (status == HN_OK && (uint32_t)arg != 0) {
            c->remote_id = (uint32_t)arg;
            uint32_t win = (uint32_t)(arg >> 32);
            if (win >= 1 && win < c->window) c->window = win;
            c->state = HN_CONNECTED;
        } else {
            c->state = HN_FAILED;
        }
    } else if (c && seq32 != HN_HELLO_SEQ) {
        uint32_t slot = seq32 % c->window;
        hn_req *r = &c->reqs[slot];
        if (c->unacked[slot] && (uint32_t)r->seq == seq32) {
            ncclResult_t err = rc != 0 ? ncclRemoteError : status_error(status);
            c->unacked[slot] = 0;
            if (r->state == HN_POSTED) { /* NCCL_HOMA_SEND_DONE=delivered */
                r->error = err;
                r->state = HN_DONE;
            }
            /* Later calls on the comm report it (with eager completion,
             * its request may be long done). */
            if (err != ncclSuccess && c->error == ncclSuccess) c->error = err;
        }
    }
    homa_release(g.sock, m);
}

static void progress(void)
{
    for (int i = 0; i < HN_PROGRESS_BATCH; i++) {
        homa_msg m;
        memset(&m, 0, sizeof(m));
        int rc = homa_recv(g.sock, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m);
        if (rc != 0 && m.id == 0) break; /* AGAIN, SHUTDOWN... */
        if (!m.is_request) {
            handle_response(rc, &m);
            continue;
        }
        if (m.length < HN_HDR_LEN || get32(m.data) != HN_MAGIC || m.data[4] != HN_VERSION) {
            /* Not ours: answered so that the sender does not retry. */
            reply_status(&m, HN_NO_COMM, 0);
            homa_release(g.sock, &m);
        } else if (m.data[5] == HN_MSG_HELLO) {
            handle_hello(&m);
        } else if (m.data[5] == HN_MSG_DATA) {
            handle_data(&m);
        } else {
            reply_status(&m, HN_NO_COMM, 0);
            homa_release(g.sock, &m);
        }
    }
}

/* ---- connection setup ------------------------------------------------- */

/* Handle layout: magic, version, port, address, listen id, and the
 * connecting side's scratch word (the send comm being set up). */
#define H_MAGIC 0
#define H_VERSION 4
#define H_PORT 6
#define H_ADDR 8
#define H_LISTEN 24
#define H_STAGE 28

ncclResult_t hn_listen(int dev, void *handle, void **listen_comm)
{
    if (!handle || !listen_comm) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ncclSuccess;
    hn_comm *l = NULL;
    if (!ready())
        rc = ncclInvalidUsage;
    else if (dev < 0 || dev >= g.ndevs)
        rc = ncclInvalidArgument;
    else if (!(l = comm_new(HN_LISTEN, dev)))
        rc = ncclSystemError;
    if (rc == ncclSuccess) {
        uint8_t *h = handle;
        memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
        put32(h + H_MAGIC, HN_MAGIC);
        h[H_VERSION] = HN_VERSION;
        h[H_PORT] = (uint8_t)g.port;
        h[H_PORT + 1] = (uint8_t)(g.port >> 8);
        memcpy(h + H_ADDR, g.devs[dev].ep.addr.bytes, 16);
        put32(h + H_LISTEN, l->id);
        *listen_comm = l;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

ncclResult_t hn_connect(int dev, int tc, void *handle, void **send_comm)
{
    if (!handle || !send_comm) return ncclInvalidArgument;
    *send_comm = NULL;
    uint8_t *h = handle;
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ncclSuccess;
    if (!ready()) {
        rc = ncclInvalidUsage;
        goto out;
    }
    if (get32(h + H_MAGIC) != HN_MAGIC || h[H_VERSION] != HN_VERSION || dev < 0 || dev >= g.ndevs) {
        WARN("connect: not a Homa handle, or bad device %d", dev);
        rc = ncclInvalidArgument;
        goto out;
    }
    uint32_t stage = get32(h + H_STAGE);
    hn_comm *c = stage ? comm_lookup(stage, HN_SEND) : NULL;
    if (!c) {
        c = comm_new(HN_SEND, dev);
        if (!c) {
            rc = ncclSystemError;
            goto out;
        }
        memcpy(c->peer.addr.bytes, h + H_ADDR, 16);
        c->peer.port = (uint16_t)(h[H_PORT] | (h[H_PORT + 1] << 8));
        c->state = HN_CONNECTING;
        int lo, hi;
        if (hn_tcmap_lookup(&g.tcmap, tc, &lo, &hi)) {
            c->send_flags = HOMA_SEND_PRIO(lo, hi);
            INFO("NET/Homa: send comm %08x, traffic class %d: priority levels %d..%d", c->id, tc,
                 lo, hi);
        }
        uint8_t hello[HN_HDR_LEN] = {0};
        put32(hello, HN_MAGIC);
        hello[4] = HN_VERSION;
        hello[5] = HN_MSG_HELLO;
        put32(hello + 8, get32(h + H_LISTEN));
        put32(hello + 12, c->id);
        put32(hello + 16, c->window);
        int hrc = homa_sendx(g.sock, &c->peer, hello, sizeof(hello),
                             ((uint64_t)c->id << 32) | HN_HELLO_SEQ, c->send_flags, NULL);
        if (hrc != 0) {
            WARN("connect: homa_send: %s", homa_strerror(hrc));
            comm_free(c);
            rc = ncclSystemError;
            goto out;
        }
        put32(h + H_STAGE, c->id);
    }
    progress();
    if (c->state == HN_CONNECTED) {
        put32(h + H_STAGE, 0);
        *send_comm = c;
    } else if (c->state == HN_FAILED) {
        char peer[HOMA_ENDPOINT_STRLEN];
        homa_endpoint_format(&c->peer, peer, sizeof(peer));
        WARN("connect to %s refused or failed", peer);
        put32(h + H_STAGE, 0);
        comm_free(c);
        rc = ncclRemoteError;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

ncclResult_t hn_accept(void *listen_comm, void **recv_comm)
{
    hn_comm *l = listen_comm;
    if (!l || !recv_comm || l->type != HN_LISTEN) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    *recv_comm = NULL;
    progress();
    hn_comm *c = l->accept_head;
    if (c) {
        l->accept_head = c->accept_next;
        if (!l->accept_head) l->accept_tail = NULL;
        c->accept_next = NULL;
        c->accepted = 1;
        *recv_comm = c;
    }
    pthread_mutex_unlock(&g_lock);
    return ncclSuccess;
}

/* ---- memory registration ---------------------------------------------- */

static char g_mr_token; /* host memory needs no registration: one token */

ncclResult_t hn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    (void)data;
    (void)size;
    if (!comm || !mhandle) return ncclInvalidArgument;
    if (type != NCCL_PTR_HOST) {
        WARN("regMr: only host memory (NCCL_PTR_HOST) is supported, not type %d", type);
        return ncclInternalError;
    }
    *mhandle = &g_mr_token;
    return ncclSuccess;
}

ncclResult_t hn_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle)
{
    (void)comm;
    (void)data;
    (void)size;
    (void)type;
    (void)offset;
    (void)fd;
    if (mhandle) *mhandle = NULL;
    WARN("regMrDmaBuf: DMA-BUF is not supported");
    return ncclInternalError;
}

ncclResult_t hn_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    return mhandle == &g_mr_token || mhandle == NULL ? ncclSuccess : ncclInvalidArgument;
}

/* ---- data path -------------------------------------------------------- */

ncclResult_t hn_isend(void *send_comm, void *data, size_t size, int tag, void **request)
{
    hn_comm *c = send_comm;
    if (!c || !request || c->type != HN_SEND || (size && !data)) return ncclInvalidArgument;
    *request = NULL;
    pthread_mutex_lock(&g_lock);
    /* Acknowledgements free the window: a caller that only retries isend
     * must still see them. */
    progress();
    ncclResult_t rc = ncclSuccess;
    if (c->state != HN_CONNECTED)
        rc = ncclInvalidUsage;
    else if (size > g.max_bytes) {
        WARN("isend of %zu bytes: more than NCCL_HOMA_MAX_BYTES (%zu)", size, g.max_bytes);
        rc = ncclInvalidArgument;
    } else if (c->error != ncclSuccess)
        rc = c->error;
    uint32_t slot = (uint32_t)(c->next_seq % c->window);
    hn_req *r = &c->reqs[slot];
    /* Window full: NULL, NCCL retries. */
    if (rc != ncclSuccess || r->state != HN_FREE || c->unacked[slot]) goto out;
    uint8_t *buf = malloc(HN_HDR_LEN + size);
    if (!buf) goto out;
    memset(buf, 0, HN_HDR_LEN);
    put32(buf, HN_MAGIC);
    buf[4] = HN_VERSION;
    buf[5] = HN_MSG_DATA;
    put32(buf + 8, c->remote_id);
    put64(buf + 12, c->next_seq);
    put32(buf + 20, (uint32_t)tag);
    put64(buf + 24, size);
    if (size) memcpy(buf + HN_HDR_LEN, data, size);
    uint64_t cookie = ((uint64_t)c->id << 32) | (uint32_t)c->next_seq;
    int hrc = homa_sendx(g.sock, &c->peer, buf, HN_HDR_LEN + size, cookie,
                         HOMA_SEND_OWNED | c->send_flags, NULL);
    if (hrc != 0) {
        free(buf);
        /* Engine limits are transient: the request is retried. */
        if (hrc != HOMA_ERR_LIMIT && hrc != HOMA_ERR_NOMEM) {
            WARN("isend: homa_send: %s", homa_strerror(hrc));
            rc = ncclSystemError;
        }
        goto out;
    }
    r->seq = c->next_seq++;
    r->state = g.eager ? HN_DONE : HN_POSTED;
    r->error = ncclSuccess;
    r->data = data;
    r->size = size;
    r->tag = tag;
    c->unacked[slot] = 1;
    *request = r;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

ncclResult_t hn_irecv(void *recv_comm, int n, void **data, const size_t *sizes, const int *tags,
                      void **request)
{
    hn_comm *c = recv_comm;
    if (!c || !request || c->type != HN_RECV || !data || !sizes || !tags)
        return ncclInvalidArgument;
    *request = NULL;
    if (n != 1) return ncclInvalidArgument; /* maxRecvs is 1 */
    if (sizes[0] && !data[0]) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    progress();
    uint32_t slot = (uint32_t)(c->next_seq % c->window);
    hn_req *r = &c->reqs[slot];
    if (r->state == HN_FREE) {
        r->seq = c->next_seq++;
        r->state = HN_POSTED;
        r->error = ncclSuccess;
        r->data = data[0];
        r->size = sizes[0];
        r->tag = tags[0];
        *request = r;
        if (c->early_valid[slot] && c->early_seq[slot] == r->seq) {
            c->early_valid[slot] = 0;
            deliver(c, r, &c->early[slot]);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return ncclSuccess;
}

ncclResult_t hn_iflush(void *recv_comm, int n, void **request)
{
    (void)recv_comm;
    (void)n;
    /* Host memory is coherent once the copy is done: nothing to flush. */
    if (request) *request = NULL;
    return ncclSuccess;
}

ncclResult_t hn_test(void *request, int *done, int *sizes)
{
    hn_req *r = request;
    if (!r || !done || !r->comm) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    hn_comm *c = r->comm;
    ncclResult_t rc = ncclSuccess;
    *done = 0;
    if (r->state == HN_FREE) {
        rc = ncclInvalidArgument;
        goto out;
    }
    progress();
    while (c->done_upto < c->next_seq && c->reqs[c->done_upto % c->window].state == HN_DONE)
        c->done_upto++;
    /* Done in posting order: only once every earlier request is. */
    if (r->state == HN_DONE && r->seq < c->done_upto) {
        *done = 1;
        if (sizes) sizes[0] = (int)r->size;
        rc = r->error != ncclSuccess ? r->error : c->type == HN_SEND ? c->error : ncclSuccess;
        r->state = HN_FREE;
        r->data = NULL;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ---- close ------------------------------------------------------------ */

static int busy(const hn_comm *c)
{
    for (uint32_t i = 0; i < HN_MAX_WINDOW; i++)
        if (c->reqs[i].state != HN_FREE) return 1;
    return 0;
}

static void drop_early(hn_comm *c)
{
    for (uint32_t i = 0; i < HN_MAX_WINDOW; i++) {
        if (!c->early_valid[i]) continue;
        /* The sender learns its message was never received. */
        reply_status(&c->early[i], HN_NO_COMM, 0);
        homa_release(g.sock, &c->early[i]);
        c->early_valid[i] = 0;
    }
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* After the last comm closes, the process usually exits (NCCL destroys its
 * communicators, then the application returns), and the replies it sent
 * last may not have reached their senders: a lost one is resent only while
 * the socket lives, and with the process gone the sender's RESEND meets an
 * ICMP unreachable and its send fails (a 4-rank ring at 2 % loss did, in
 * about 1 run of 20).  So the last close waits, up to NCCL_HOMA_LINGER_MS,
 * until every RPC of the socket is finished (replies acknowledged),
 * answering what still arrives.  Usually that takes a few milliseconds
 * (the clients' acks).  Lock held. */
static void linger_if_last(void)
{
    if (g.live != 0 || g.linger_ns == 0 || g.sock == NULL) return;
    uint64_t start = mono_ns();
    for (;;) {
        progress();
        int rc = homa_socket_linger(g.sock, 1000000);
        if (rc != HOMA_ERR_AGAIN) break;
        if (mono_ns() - start >= g.linger_ns) {
            INFO("NET/Homa: last comm closed with RPCs unfinished after %llu ms",
                 (unsigned long long)(g.linger_ns / 1000000));
            break;
        }
    }
}

ncclResult_t hn_close_send(void *send_comm)
{
    hn_comm *c = send_comm;
    if (!c) return ncclSuccess;
    if (c->type != HN_SEND) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ncclSuccess;
    if (busy(c)) {
        WARN("closeSend: comm %u still has requests in flight; not closed", c->id);
        rc = ncclInvalidUsage;
    } else {
        comm_free(c);
        linger_if_last();
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

ncclResult_t hn_close_recv(void *recv_comm)
{
    hn_comm *c = recv_comm;
    if (!c) return ncclSuccess;
    if (c->type != HN_RECV) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ncclSuccess;
    if (busy(c)) {
        WARN("closeRecv: comm %u still has requests in flight; not closed", c->id);
        rc = ncclInvalidUsage;
    } else {
        drop_early(c);
        comm_free(c);
        linger_if_last();
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

ncclResult_t hn_close_listen(void *listen_comm)
{
    hn_comm *l = listen_comm;
    if (!l) return ncclSuccess;
    if (l->type != HN_LISTEN) return ncclInvalidArgument;
    pthread_mutex_lock(&g_lock);
    /* Connections that arrived but were never accepted go with it. */
    for (hn_comm *c = l->accept_head, *next; c; c = next) {
        next = c->accept_next;
        drop_early(c);
        comm_free(c);
    }
    comm_free(l);
    homa_driver_counters dc;
    homa_runtime_counters(g.rt, NULL, &dc);
    INFO("NET/Homa: %llu packets out, %llu in, %llu dropped by HOMA_FAULTS",
         (unsigned long long)dc.datagrams_out, (unsigned long long)dc.datagrams_in,
         (unsigned long long)dc.fault_drops);
    linger_if_last();
    pthread_mutex_unlock(&g_lock);
    return ncclSuccess;
}

ncclResult_t hn_make_vdevice(int *d, const ncclNetVDeviceProps_v9_t *props)
{
    /* Homa devices are separate addresses: only a "virtual" device made of
     * one real device is possible, and it is that device. */
    if (!d || !props || props->ndevs != 1) return ncclInvalidUsage;
    pthread_mutex_lock(&g_lock);
    ncclResult_t rc = ncclInvalidArgument;
    if (ready() && props->devs[0] >= 0 && props->devs[0] < g.ndevs) {
        *d = props->devs[0];
        rc = ncclSuccess;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}
