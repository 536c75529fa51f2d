/* homa-perf soak: the worker processes (client and server), see soak.h. */
#include "soak.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <homa/homa.h>

#include "pattern.h"
#include "wlgen.h"

/* --verbose: the runtime's non-zero counters on stderr at exit. */
static void dump_counters(homa_runtime *rt, const char *who, int index)
{
    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(rt, &ec, &dc);
    fprintf(stderr, "soak %s %d counters:", who, index);
    const uint64_t *e = (const uint64_t *)&ec;
    for (size_t i = 0; i < homa_counter_count(); i++)
        if (e[i]) fprintf(stderr, " %s=%llu", homa_counter_name(i), (unsigned long long)e[i]);
    const uint64_t *d = (const uint64_t *)&dc;
    for (size_t i = 0; i < homa_driver_counter_count(); i++)
        if (d[i])
            fprintf(stderr, " %s=%llu", homa_driver_counter_name(i), (unsigned long long)d[i]);
    fprintf(stderr, "\n");
}

/* Scheduling stalls of this worker: how much longer than 50 ms (the
 * longest it waits on purpose) the longest gap between two turns of its
 * main loop was.  A stall near the RPC timeout means the process was
 * descheduled (a loaded host), not that the protocol stalled. */
#define STALL_ALLOWANCE_NS 50000000ull
static uint64_t stall_last, stall_max;

static void stall_tick(uint64_t now)
{
    if (stall_last != 0 && now - stall_last > STALL_ALLOWANCE_NS + stall_max)
        stall_max = now - stall_last - STALL_ALLOWANCE_NS;
    stall_last = now;
}

static double stall_take_ms(void)
{
    double ms = (double)stall_max / 1e6;
    stall_max = 0;
    return ms;
}

static pthread_mutex_t rep_lock = PTHREAD_MUTEX_INITIALIZER;

/* One report line to the orchestrator (a single write: atomic below
 * PIPE_BUF, so lines of several threads never mix). */
static void report(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    pthread_mutex_lock(&rep_lock);
    ssize_t w = write(SOAK_REP_FD, line, (size_t)n);
    pthread_mutex_unlock(&rep_lock);
    (void)w;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Applies a phase's spec ("-" = none).  A seeded spec gets a seed of its
 * own per worker, so processes do not lose the same packets in step. */
static int apply_faults(homa_runtime *rt, const char *spec, int role, int index)
{
    homa_faults f;
    memset(&f, 0, sizeof(f));
    f.delay_us = 1000;
    if (strcmp(spec, "-") != 0) {
        char err[200];
        if (homa_faults_parse(spec, &f, err, sizeof(err)) != 0) {
            report("E bad fault spec '%s': %s", spec, err);
            return -1;
        }
        if (f.seed != 0) f.seed = pattern_mix64(f.seed ^ ((uint64_t)role << 32 | (uint64_t)index));
    }
    int rc = homa_runtime_set_faults(rt, &f);
    if (rc != 0) {
        report("E homa_runtime_set_faults: %s", homa_strerror(rc));
        return -1;
    }
    return 0;
}

/* Reads complete lines from the control pipe without blocking.  Returns the
 * number of bytes now in buf (a line ends in '\n'), -1 at EOF. */
typedef struct linebuf {
    char buf[2048];
    size_t n;
} linebuf;

static int ctl_fill(linebuf *lb, int timeout_ms)
{
    struct pollfd pfd = {.fd = SOAK_CTL_FD, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0) return 0;
    if (lb->n >= sizeof(lb->buf) - 1) lb->n = 0; /* an overlong line: junk */
    ssize_t r = read(SOAK_CTL_FD, lb->buf + lb->n, sizeof(lb->buf) - 1 - lb->n);
    if (r == 0) return -1;
    if (r < 0) return errno == EINTR || errno == EAGAIN ? 0 : -1;
    lb->n += (size_t)r;
    return 1;
}

/* Takes the next complete line (without '\n') into out; 1 if there was one. */
static int ctl_line(linebuf *lb, char *out, size_t cap)
{
    char *nl = memchr(lb->buf, '\n', lb->n);
    if (nl == NULL) return 0;
    size_t len = (size_t)(nl - lb->buf);
    size_t c = len < cap - 1 ? len : cap - 1;
    memcpy(out, lb->buf, c);
    out[c] = '\0';
    memmove(lb->buf, nl + 1, lb->n - len - 1);
    lb->n -= len + 1;
    return 1;
}

/* "F <phase> <client spec> <server spec>" */
static int parse_phase(const char *line, int *phase, char *cspec, char *sspec)
{
    char c[SOAK_SPEC_LEN], s[SOAK_SPEC_LEN];
    if (sscanf(line, "F %d %255s %255s", phase, c, s) != 3) return -1;
    snprintf(cspec, SOAK_SPEC_LEN, "%s", c);
    snprintf(sspec, SOAK_SPEC_LEN, "%s", s);
    return 0;
}

/* ---- Server ------------------------------------------------------------ */

/* Deliveries per client: a ring of SEEN_BITS sequence numbers from `base`.
 * Requests carry the client's low-water mark (every lower sequence number
 * is finished at the client), which moves base up, so memory stays
 * bounded however long the run. */
#define SEEN_BITS (1u << 20)
typedef struct seen {
    uint64_t base;
    uint8_t bits[SEEN_BITS / 8];
} seen;

typedef struct server {
    const soak_opts *o;
    homa_socket *sock;
    pthread_mutex_t lock;
    seen *clients[SOAK_MAX_PROCS];
    int stop;
    /* Counters (atomics), reported per phase. */
    uint64_t requests, dups, bad, reply_errors, bytes;
} server;

static void seen_clear(seen *s, uint64_t from, uint64_t to)
{
    if (to - from >= SEEN_BITS) {
        memset(s->bits, 0, sizeof(s->bits));
        return;
    }
    for (uint64_t q = from; q < to; q++)
        s->bits[(q % SEEN_BITS) / 8] &= (uint8_t) ~(1u << (q % 8));
}

/* Records a delivery; returns NULL, or why it is a duplicate. */
static const char *seen_add(server *sv, int client, uint64_t seq, uint64_t low)
{
    const char *why = NULL;
    pthread_mutex_lock(&sv->lock);
    seen *s = sv->clients[client];
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        sv->clients[client] = s;
        if (s == NULL) {
            pthread_mutex_unlock(&sv->lock);
            return NULL; /* cannot check: not a duplicate we saw */
        }
        s->base = low;
    }
    if (low > s->base) {
        seen_clear(s, s->base, low);
        s->base = low;
    }
    if (seq < s->base) {
        /* The client had finished this RPC before this delivery. */
        why = "late";
    } else {
        if (seq - s->base >= SEEN_BITS) {
            uint64_t nb = seq - SEEN_BITS + 1;
            seen_clear(s, s->base, nb);
            s->base = nb;
        }
        uint8_t *b = &s->bits[(seq % SEEN_BITS) / 8];
        uint8_t m = (uint8_t)(1u << (seq % 8));
        if (*b & m) why = "twice";
        *b |= m;
    }
    pthread_mutex_unlock(&sv->lock);
    return why;
}

static void *server_thread(void *arg)
{
    server *sv = arg;
    const soak_opts *o = sv->o;
    while (!__atomic_load_n(&sv->stop, __ATOMIC_RELAXED)) {
        homa_msg m;
        int rc = homa_recv(sv->sock, HOMA_RECV_REQUEST, 0, 200000000ll, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc != 0) continue;
        const uint8_t *d = m.data;
        int ok = m.length >= SOAK_REQ_HDR && get32(d) == SOAK_REQ_MAGIC;
        int client = ok ? (int)(get32(d + 4) & 0xffff) : -1;
        uint64_t seq = ok ? get64(d + 8) : 0;
        uint64_t low = ok ? get64(d + 16) : 0;
        uint32_t resp_len = ok ? get32(d + 24) : 0;
        uint32_t req_len = ok ? get32(d + 28) : 0;
        if (ok && (client >= o->clients || req_len != m.length || resp_len < SOAK_RESP_HDR ||
                   resp_len > o->max_size || low > seq))
            ok = 0;
        if (ok && !pattern_check(d + SOAK_REQ_HDR, m.length - SOAK_REQ_HDR,
                                 soak_key(o->seed, client, seq, 0)))
            ok = 0;
        if (!ok) {
            __atomic_fetch_add(&sv->bad, 1, __ATOMIC_RELAXED);
            report("V server %d: request of %zu bytes (client %d seq %llu) has wrong bytes",
                   o->index, m.length, client, (unsigned long long)seq);
            homa_release(sv->sock, &m);
            continue;
        }
        __atomic_fetch_add(&sv->requests, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&sv->bytes, m.length + resp_len, __ATOMIC_RELAXED);
        const char *why = seen_add(sv, client, seq, low);
        if (why != NULL) {
            __atomic_fetch_add(&sv->dups, 1, __ATOMIC_RELAXED);
            report("D %d %llu %s", client, (unsigned long long)seq, why);
        }
        uint8_t *resp = malloc(resp_len);
        if (resp == NULL) {
            report("E server %d: out of memory for a %u-byte response", o->index, resp_len);
            _exit(1);
        }
        put32(resp, SOAK_RESP_MAGIC);
        put32(resp + 4, (uint32_t)client);
        put64(resp + 8, seq);
        put32(resp + 16, resp_len);
        pattern_fill(resp + SOAK_RESP_HDR, resp_len - SOAK_RESP_HDR,
                     soak_key(o->seed, client, seq, 1));
        rc = homa_reply_msg_owned(sv->sock, &m, resp, resp_len);
        if (rc != 0) {
            /* The client gave up (NOT_FOUND) or the socket closes. */
            free(resp);
            __atomic_fetch_add(&sv->reply_errors, 1, __ATOMIC_RELAXED);
        }
        homa_release(sv->sock, &m);
    }
    return NULL;
}

typedef struct phase_base {
    uint64_t requests, dups, bad, reply_errors, bytes;
    homa_counters ec;
} phase_base;

static void server_report(server *sv, homa_runtime *rt, int phase, phase_base *b)
{
    homa_counters ec;
    homa_runtime_counters(rt, &ec, NULL);
    uint64_t req = __atomic_load_n(&sv->requests, __ATOMIC_RELAXED);
    uint64_t dups = __atomic_load_n(&sv->dups, __ATOMIC_RELAXED);
    uint64_t bad = __atomic_load_n(&sv->bad, __ATOMIC_RELAXED);
    uint64_t rerr = __atomic_load_n(&sv->reply_errors, __ATOMIC_RELAXED);
    report("R %d requests=%llu dups=%llu bad=%llu reply_errors=%llu retx_bytes=%llu "
           "server_timeouts=%llu live=%llu stall_ms=%.1f",
           phase, (unsigned long long)(req - b->requests), (unsigned long long)(dups - b->dups),
           (unsigned long long)(bad - b->bad), (unsigned long long)(rerr - b->reply_errors),
           (unsigned long long)(ec.retransmit_bytes - b->ec.retransmit_bytes),
           (unsigned long long)(ec.server_timeouts - b->ec.server_timeouts),
           (unsigned long long)ec.rpcs_live, stall_take_ms());
    b->requests = req;
    b->dups = dups;
    b->bad = bad;
    b->reply_errors = rerr;
    b->ec = ec;
}

int soak_server_main(const soak_opts *o)
{
    homa_runtime_options ro;
    char err[256];
    if (soak_runtime_options(o, &ro, err, sizeof(err)) < 0) {
        report("E %s", err);
        return 1;
    }
    homa_runtime *rt;
    int rc = homa_runtime_create(&ro, &rt);
    server *sv = calloc(1, sizeof(*sv));
    if (rc != 0 || sv == NULL) {
        report("E server %d: runtime: %s", o->index, homa_strerror(rc ? rc : HOMA_ERR_NOMEM));
        return 1;
    }
    sv->o = o;
    pthread_mutex_init(&sv->lock, NULL);
    homa_endpoint local;
    homa_endpoint_from_host("127.0.0.1", (uint16_t)o->port, &local);
    /* A restarted server may find its port still held for a moment. */
    for (int tries = 0;; tries++) {
        rc = homa_socket_bind(rt, &local, &sv->sock);
        if (rc != HOMA_ERR_PORT_IN_USE || tries >= 200) break;
        usleep(10000);
    }
    if (rc != 0) {
        report("E server %d: port %d: %s", o->index, o->port, homa_strerror(rc));
        return 1;
    }
    int phase = -1;
    if (o->start_phase >= 0 && o->start_spec != NULL) {
        phase = o->start_phase;
        if (apply_faults(rt, o->start_spec, SOAK_ROLE_SERVER, o->index) != 0) return 1;
    }
    pthread_t th[64];
    int nth = o->server_threads;
    for (int i = 0; i < nth; i++)
        pthread_create(&th[i], NULL, server_thread, sv);
    report("P %u", (unsigned)homa_socket_port(sv->sock));
    phase_base base;
    memset(&base, 0, sizeof(base));
    homa_runtime_counters(rt, &base.ec, NULL);
    linebuf lb = {.n = 0};
    int status = 0;
    for (;;) {
        int r = ctl_fill(&lb, 40);
        stall_tick(mono_ns());
        if (r < 0) {
            status = 1; /* the orchestrator is gone */
            break;
        }
        char line[600];
        int quit = 0;
        while (ctl_line(&lb, line, sizeof(line))) {
            int p;
            char cs[SOAK_SPEC_LEN], ss[SOAK_SPEC_LEN];
            if (line[0] == 'Q') {
                quit = 1;
                break;
            }
            if (parse_phase(line, &p, cs, ss) != 0) continue;
            if (phase >= 0) server_report(sv, rt, phase, &base);
            phase = p;
            if (apply_faults(rt, ss, SOAK_ROLE_SERVER, o->index) != 0) return 1;
        }
        if (quit) {
            if (phase >= 0) server_report(sv, rt, phase, &base);
            break;
        }
    }
    __atomic_store_n(&sv->stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (o->verbose) dump_counters(rt, "server", o->index);
    homa_socket_close(sv->sock);
    homa_runtime_destroy(rt);
    for (int i = 0; i < SOAK_MAX_PROCS; i++)
        free(sv->clients[i]);
    pthread_mutex_destroy(&sv->lock);
    free(sv);
    report("X");
    return status;
}

/* ---- Client ------------------------------------------------------------ */

typedef struct slot {
    int busy;
    int server;
    uint64_t seq;
    uint64_t id; /* the RPC id, to abort a hung RPC */
    uint32_t req_len, resp_len;
    uint64_t start_ns;
} slot;

typedef struct client_ctr {
    uint64_t rpcs, timeouts, other_errors, bad, hangs, bytes, send_errors;
    uint64_t max_lat_ns;
    int max_per_server; /* most RPCs outstanding to one server */
    int first_error;
} client_ctr;

static void client_report(int phase, client_ctr *c, homa_runtime *rt, homa_counters *prev)
{
    homa_counters ec;
    homa_runtime_counters(rt, &ec, NULL);
    report("R %d rpcs=%llu timeouts=%llu other_errors=%llu bad=%llu hangs=%llu bytes=%llu "
           "send_errors=%llu max_ms=%.1f max_in_flight=%d retx_bytes=%llu restarts=%llu "
           "first_error=%d stall_ms=%.1f",
           phase, (unsigned long long)c->rpcs, (unsigned long long)c->timeouts,
           (unsigned long long)c->other_errors, (unsigned long long)c->bad,
           (unsigned long long)c->hangs, (unsigned long long)c->bytes,
           (unsigned long long)c->send_errors, (double)c->max_lat_ns / 1e6, c->max_per_server,
           (unsigned long long)(ec.retransmit_bytes - prev->retransmit_bytes),
           (unsigned long long)(ec.client_restarts - prev->client_restarts), c->first_error,
           stall_take_ms());
    *prev = ec;
    memset(c, 0, sizeof(*c));
}

int soak_client_main(const soak_opts *o)
{
    char err[256];
    /* Server ports. */
    int nserv = 0;
    homa_endpoint dst[SOAK_MAX_PROCS];
    {
        const char *p = o->ports ? o->ports : "";
        while (*p && nserv < SOAK_MAX_PROCS) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v <= 0 || v > 65535) break;
            homa_endpoint_from_host("127.0.0.1", (uint16_t)v, &dst[nserv++]);
            p = *end == ',' ? end + 1 : end;
        }
    }
    if (nserv == 0) {
        report("E client %d: no server ports", o->index);
        return 1;
    }
    /* Workloads: one, or w1..w5 for "mixed". */
    wlgen wl[5];
    int nwl = 0;
    if (strcmp(o->workload, "mixed") == 0) {
        static const char *const names[5] = {"w1", "w2", "w3", "w4", "w5"};
        for (int i = 0; i < 5; i++) {
            if (wlgen_open(&wl[i], names[i], o->data_dir, o->max_size, err, sizeof(err)) < 0) {
                report("E %s", err);
                return 1;
            }
        }
        nwl = 5;
    } else {
        if (wlgen_open(&wl[0], o->workload, o->data_dir, o->max_size, err, sizeof(err)) < 0) {
            report("E %s", err);
            return 1;
        }
        nwl = 1;
    }
    homa_runtime_options ro;
    if (soak_runtime_options(o, &ro, err, sizeof(err)) < 0) {
        report("E %s", err);
        return 1;
    }
    homa_runtime *rt;
    homa_socket *sock;
    int rc = homa_runtime_create(&ro, &rt);
    if (rc == 0) rc = homa_socket_open(rt, 0, &sock);
    if (rc != 0) {
        report("E client %d: %s", o->index, homa_strerror(rc));
        return 1;
    }
    int n = o->in_flight;
    slot *slots = calloc((size_t)n, sizeof(*slots));
    int *free_slots = calloc((size_t)n, sizeof(int));
    if (slots == NULL || free_slots == NULL) {
        report("E client %d: out of memory", o->index);
        return 1;
    }
    int nfree = n;
    for (int i = 0; i < n; i++)
        free_slots[i] = n - 1 - i;
    int per_server[SOAK_MAX_PROCS] = {0};
    perf_rng rng;
    rng_seed(&rng, o->seed, 1000u + (uint64_t)o->index);
    uint64_t next_seq = 1, low = 1;
    uint64_t hang_ns = (uint64_t)(o->hang_seconds * 1e9);
    double ns_per_byte = o->gbps > 0 ? 8.0 * o->clients / o->gbps : 0; /* ns per request byte */
    uint64_t next_send = mono_ns();
    client_ctr ctr;
    memset(&ctr, 0, sizeof(ctr));
    homa_counters prev;
    homa_runtime_counters(rt, &prev, NULL);
    report("READY");

    linebuf lb = {.n = 0};
    int phase = -1, quitting = 0, status = 0, outstanding = 0;
    uint64_t last_scan = mono_ns();
    for (;;) {
        /* Commands.  Wait for the first phase before sending anything. */
        int r = ctl_fill(&lb, phase < 0 ? 1000 : 0);
        if (r < 0) {
            status = 1;
            break;
        }
        char line[600];
        while (ctl_line(&lb, line, sizeof(line))) {
            int p;
            char cs[SOAK_SPEC_LEN], ss[SOAK_SPEC_LEN];
            if (line[0] == 'Q') {
                quitting = 1;
                continue;
            }
            if (parse_phase(line, &p, cs, ss) != 0) continue;
            if (phase >= 0) client_report(phase, &ctr, rt, &prev);
            phase = p;
            if (apply_faults(rt, cs, SOAK_ROLE_CLIENT, o->index) != 0) return 1;
        }
        if (phase < 0) continue;
        uint64_t now = mono_ns();
        stall_tick(now);
        /* Issue requests up to the window (and the rate cap). */
        while (!quitting && nfree > 0 && (ns_per_byte == 0 || now >= next_send)) {
            int si = free_slots[--nfree];
            slot *s = &slots[si];
            const wlgen *g = &wl[nwl == 1 ? 0 : (int)(rng_next(&rng) % 5)];
            uint32_t qlen = wlgen_sample(g, &rng), plen = wlgen_sample(g, &rng);
            if (qlen < SOAK_REQ_HDR) qlen = SOAK_REQ_HDR;
            if (plen < SOAK_RESP_HDR) plen = SOAK_RESP_HDR;
            int sv = (int)(rng_next(&rng) % (uint64_t)nserv);
            uint64_t seq = next_seq++;
            /* The low-water mark: nothing below it is outstanding.  Found
             * again every 64 requests; a stale (lower) value is safe. */
            if ((seq & 63) == 0) {
                low = seq;
                for (int i = 0; i < n; i++)
                    if (slots[i].busy && slots[i].seq < low) low = slots[i].seq;
            }
            uint8_t *buf = malloc(qlen);
            if (buf == NULL) {
                report("E client %d: out of memory for a %u-byte request", o->index, qlen);
                return 1;
            }
            put32(buf, SOAK_REQ_MAGIC);
            put32(buf + 4, (uint32_t)o->index);
            put64(buf + 8, seq);
            put64(buf + 16, low);
            put32(buf + 24, plen);
            put32(buf + 28, qlen);
            pattern_fill(buf + SOAK_REQ_HDR, qlen - SOAK_REQ_HDR,
                         soak_key(o->seed, o->index, seq, 0));
            *s = (slot){.busy = 1,
                        .server = sv,
                        .seq = seq,
                        .req_len = qlen,
                        .resp_len = plen,
                        .start_ns = now};
            rc = homa_send_owned(sock, &dst[sv], buf, qlen, (uint64_t)si, &s->id);
            if (rc != 0) {
                free(buf);
                s->busy = 0;
                free_slots[nfree++] = si;
                ctr.send_errors++;
                if (!ctr.first_error) ctr.first_error = rc;
                break;
            }
            outstanding++;
            if (++per_server[sv] > ctr.max_per_server) ctr.max_per_server = per_server[sv];
            if (ns_per_byte > 0) {
                next_send += (uint64_t)(ns_per_byte * qlen);
                if (next_send + 1000000000ull < now) next_send = now; /* no catch-up bursts */
            }
        }
        if (quitting && outstanding == 0) break;
        /* Completions. */
        int64_t wait = 20000000; /* 20 ms: commands are looked at in between */
        if (ns_per_byte > 0 && nfree > 0 && !quitting && next_send > now &&
            next_send - now < (uint64_t)wait)
            wait = (int64_t)(next_send - now);
        for (int k = 0; k < 64 && outstanding > 0; k++) {
            homa_msg m;
            rc = homa_recv(sock, HOMA_RECV_RESPONSE, 0, k == 0 ? wait : HOMA_NONBLOCK, &m);
            if (m.id == 0) break;
            int si = (int)m.cookie;
            if (si < 0 || si >= n || !slots[si].busy) {
                ctr.bad++;
                report("V client %d: response with unknown cookie %llu", o->index,
                       (unsigned long long)m.cookie);
                homa_release(sock, &m);
                continue;
            }
            slot *s = &slots[si];
            uint64_t t = mono_ns();
            if (rc == 0) {
                const uint8_t *d = m.data;
                int ok = m.length == s->resp_len && get32(d) == SOAK_RESP_MAGIC &&
                         get32(d + 4) == (uint32_t)o->index && get64(d + 8) == s->seq &&
                         get32(d + 16) == s->resp_len &&
                         pattern_check(d + SOAK_RESP_HDR, m.length - SOAK_RESP_HDR,
                                       soak_key(o->seed, o->index, s->seq, 1));
                if (!ok) {
                    ctr.bad++;
                    report("V client %d: response of seq %llu (%zu bytes, want %u) has wrong "
                           "bytes",
                           o->index, (unsigned long long)s->seq, m.length, s->resp_len);
                } else {
                    ctr.rpcs++;
                    ctr.bytes += s->req_len + s->resp_len;
                    if (t - s->start_ns > ctr.max_lat_ns) ctr.max_lat_ns = t - s->start_ns;
                }
                homa_release(sock, &m);
            } else {
                /* The peer gone: silence, or (a server killed before its
                 * restart) ICMP port unreachable, which fails at once. */
                if (rc == HOMA_ERR_TIMEOUT || rc == HOMA_ERR_UNREACHABLE)
                    ctr.timeouts++;
                else
                    ctr.other_errors++;
                if (!ctr.first_error) ctr.first_error = rc;
                report("T client %d: seq %llu to server %d (request %u B, response %u B) failed "
                       "after %.2f s: %s",
                       o->index, (unsigned long long)s->seq, s->server, s->req_len, s->resp_len,
                       (double)(t - s->start_ns) / 1e9, homa_strerror(rc));
            }
            per_server[s->server]--;
            s->busy = 0;
            free_slots[nfree++] = si;
            outstanding--;
        }
        /* Hangs: an RPC outstanding past the limit is counted once and
         * abandoned (aborted), so the run can go on and report. */
        uint64_t t = mono_ns();
        if (t - last_scan > 1000000000ull || quitting) {
            last_scan = t;
            for (int i = 0; i < n; i++) {
                slot *s = &slots[i];
                if (!s->busy || t - s->start_ns < hang_ns) continue;
                ctr.hangs++;
                report("V hang: client %d: seq %llu to server %d outstanding for %.1f s", o->index,
                       (unsigned long long)s->seq, s->server, (double)(t - s->start_ns) / 1e9);
                homa_abort(sock, s->id);
                per_server[s->server]--;
                s->busy = 0;
                free_slots[nfree++] = i;
                outstanding--;
            }
        }
    }
    if (phase >= 0) client_report(phase, &ctr, rt, &prev);
    if (o->verbose) dump_counters(rt, "client", o->index);
    homa_socket_close(sock);
    homa_runtime_destroy(rt);
    for (int i = 0; i < nwl; i++)
        wlgen_close(&wl[i]);
    free(slots);
    free(free_slots);
    report("X");
    return status;
}

int soak_worker_main(int argc, char **argv)
{
    soak_opts o;
    int rc = soak_parse(argc, argv, 2, &o);
    if (rc) return rc;
    if (fcntl(SOAK_CTL_FD, F_GETFD) < 0 || fcntl(SOAK_REP_FD, F_GETFD) < 0) {
        fprintf(stderr, "homa-perf soak-worker: started by homa-perf soak only\n");
        return 2;
    }
    if (o.worker_role == SOAK_ROLE_SERVER) return soak_server_main(&o);
    if (o.worker_role == SOAK_ROLE_CLIENT) return soak_client_main(&o);
    fprintf(stderr, "homa-perf soak-worker: --role client|server is required\n");
    return 2;
}
