/* homa-perf cluster: collecting the results of a run.  Reads the switch's
 * per-priority queue counters and the hosts' /proc/net/snmp (tc and ip in
 * the namespaces), captures the CUTOFFS packets Homa announces (tcpdump in
 * host 0) and decodes them, merges the agents' counters, reads the
 * per-message records the agents wrote, and analyses those records into
 * latency and slowdown histograms and goodput (cluster_analyse()). */
#include "ctl.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- Switch counters -------------------------------------------------------- */

/* Value of field `name` in the "Udp:" or "Tcp:" lines of /proc/net/snmp. */
static uint64_t snmp_field(const char *text, const char *proto, const char *name)
{
    const char *hdr = strstr(text, proto);
    while (hdr && hdr != text && hdr[-1] != '\n')
        hdr = strstr(hdr + 1, proto);
    if (!hdr) return 0;
    const char *vals = strchr(hdr, '\n');
    if (!vals || strncmp(vals + 1, proto, strlen(proto)) != 0) return 0;
    vals += 1 + strlen(proto);
    const char *h = hdr + strlen(proto);
    size_t nlen = strlen(name);
    for (;;) {
        while (*h == ' ')
            h++;
        while (*vals == ' ')
            vals++;
        if (*h == '\n' || !*h || *vals == '\n' || !*vals) return 0;
        if (strncmp(h, name, nlen) == 0 && (h[nlen] == ' ' || h[nlen] == '\n'))
            return strtoull(vals, NULL, 10);
        while (*h && *h != ' ' && *h != '\n')
            h++;
        while (*vals && *vals != ' ' && *vals != '\n')
            vals++;
    }
}

/* Sums "Sent B bytes P pkt (dropped D," of the pfifo leaves of a port;
 * per priority if by_level (leaves 10:..17:). */
static void parse_tc(const char *out, uint64_t *pkts, uint64_t *drops, int by_level)
{
    int level = -1;
    for (const char *l = out; l && *l;) {
        const char *nl = strchr(l, '\n');
        unsigned h;
        unsigned long long p, d, b;
        if (strncmp(l, "qdisc pfifo ", 12) == 0 && sscanf(l + 12, "%x:", &h) == 1)
            level = by_level ? (h >= 0x10 && h <= 0x17 ? (int)(h - 0x10) : -1) : 0;
        else if (level >= 0 &&
                 sscanf(l, " Sent %llu bytes %llu pkt (dropped %llu", &b, &p, &d) == 3) {
            pkts[level] += p;
            drops[level] += d;
            level = -1;
        }
        l = nl ? nl + 1 : NULL;
    }
}

void cluster_read_qstats(qstats *q, int hosts)
{
    memset(q, 0, sizeof(*q));
    static char out[65536];
    char ns[64], dev[16];
    for (int i = 0; i < hosts; i++) {
        snprintf(ns, sizeof(ns), "%s-sw", g_cluster.name);
        snprintf(dev, sizeof(dev), "p%d", i);
        char *a1[] = {"tc", "-n", ns, "-s", "qdisc", "show", "dev", dev, NULL};
        if (cluster_capture_cmd(a1, out, sizeof(out)) == 0)
            parse_tc(out, q->pkts[i], q->drops[i], 1);
        cluster_host_ns(i, ns, sizeof(ns));
        char *a2[] = {"tc", "-n", ns, "-s", "qdisc", "show", "dev", "eth0", NULL};
        uint64_t p[NPRIO] = {0}, d[NPRIO] = {0};
        if (cluster_capture_cmd(a2, out, sizeof(out)) == 0) parse_tc(out, p, d, 0);
        q->nic_pkts[i] = p[0];
        q->nic_drops[i] = d[0];
        char *a3[] = {"ip", "netns", "exec", ns, "cat", "/proc/net/snmp", NULL};
        if (cluster_capture_cmd(a3, out, sizeof(out)) == 0) {
            q->udp_in += snmp_field(out, "Udp:", "InDatagrams");
            q->udp_rcvbuf_errors += snmp_field(out, "Udp:", "RcvbufErrors");
            q->udp_sndbuf_errors += snmp_field(out, "Udp:", "SndbufErrors");
            q->udp_in_errors += snmp_field(out, "Udp:", "InErrors");
            q->tcp_out_segs += snmp_field(out, "Tcp:", "OutSegs");
            q->tcp_retrans_segs += snmp_field(out, "Tcp:", "RetransSegs");
        }
    }
}

void cluster_qstats_diff(qstats *after, const qstats *before, int hosts)
{
    for (int i = 0; i < hosts; i++) {
        for (int l = 0; l < NPRIO; l++) {
            after->pkts[i][l] -= before->pkts[i][l];
            after->drops[i][l] -= before->drops[i][l];
        }
        after->nic_pkts[i] -= before->nic_pkts[i];
        after->nic_drops[i] -= before->nic_drops[i];
    }
    after->udp_in -= before->udp_in;
    after->udp_rcvbuf_errors -= before->udp_rcvbuf_errors;
    after->udp_sndbuf_errors -= before->udp_sndbuf_errors;
    after->udp_in_errors -= before->udp_in_errors;
    after->tcp_out_segs -= before->tcp_out_segs;
    after->tcp_retrans_segs -= before->tcp_retrans_segs;
}

/* ---- CUTOFFS capture (tcpdump in host 0) ---------------------------------------- */

int cluster_tool_exists(const char *name)
{
    const char *path = getenv("PATH");
    char buf[4096], f[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(f, sizeof(f), "%s/%s", d, name);
        if (access(f, X_OK) == 0) return 1;
    }
    return 0;
}

pid_t cluster_start_capture(const char *file)
{
    char ns[64];
    cluster_host_ns(0, ns, sizeof(ns));
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* CUTOFFS packets only: Homa type byte (offset 11) = 0x15. */
        execlp("ip", "ip", "netns", "exec", ns, "tcpdump", "-i", "eth0", "-n", "-U", "-s", "128",
               "-w", file, "udp[19] == 0x15", (char *)NULL);
        _exit(127);
    }
    return pid;
}

void cluster_stop_capture(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGINT);
    int st;
    for (int i = 0; i < 50; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) return;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a pcap of CUTOFFS packets; keeps the last announcement per sender. */
int cluster_parse_cutoffs(const char *file, cutoffs_seen *out, int max)
{
    FILE *f = fopen(file, "rb");
    if (!f) return 0;
    uint8_t gh[24];
    int n = 0;
    if (fread(gh, 1, 24, f) != 24) {
        fclose(f);
        return 0;
    }
    uint32_t magic;
    memcpy(&magic, gh, 4);
    int swap = magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u;
    uint32_t link;
    memcpy(&link, gh + 20, 4);
    if (swap) link = __builtin_bswap32(link);
    uint8_t rh[16], pkt[65536];
    while (fread(rh, 1, 16, f) == 16) {
        uint32_t incl;
        memcpy(&incl, rh + 8, 4);
        if (swap) incl = __builtin_bswap32(incl);
        if (incl > sizeof(pkt) || fread(pkt, 1, incl, f) != incl) break;
        size_t off = link == 1 ? 14 : 0; /* Ethernet or raw IP */
        if (incl < off + 20) continue;
        const uint8_t *ip = pkt + off;
        size_t ihl = (size_t)(ip[0] & 15) * 4;
        if ((ip[0] >> 4) != 4 || ip[9] != 17 || incl < off + ihl + 8 + 62) continue;
        const uint8_t *h = ip + ihl + 8;
        if (h[11] != 0x15) continue;
        char from[16];
        snprintf(from, sizeof(from), "%u.%u.%u.%u", ip[12], ip[13], ip[14], ip[15]);
        int k = 0;
        while (k < n && strcmp(out[k].from, from) != 0)
            k++;
        if (k == n) {
            if (n == max) continue;
            memset(&out[n], 0, sizeof(out[n]));
            snprintf(out[n].from, sizeof(out[n].from), "%s", from);
            n++;
        }
        for (int i = 0; i < NPRIO; i++)
            out[k].cutoffs[i] = be32(h + 28 + 4 * i);
        out[k].version = (unsigned)(h[60] << 8 | h[61]);
        out[k].packets++;
    }
    fclose(f);
    return n;
}

/* ---- Results --------------------------------------------------------------------- */

void cluster_counters_add(presult *p, const char *list)
{
    char buf[8192];
    snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = '\0';
        uint64_t v = strtoull(eq + 1, NULL, 10);
        int gauge = strstr(t, "peak") || strcmp(t, "rx_bytes_in_use") == 0 ||
                    strcmp(t, "incoming_bytes") == 0 || strcmp(t, "rpcs_live") == 0 ||
                    strcmp(t, "tombstones") == 0;
        int k = 0;
        while (k < p->ncounters && strcmp(p->counters[k].name, t) != 0)
            k++;
        if (k == p->ncounters) {
            if (k == MAX_COUNTERS) continue;
            snprintf(p->counters[k].name, sizeof(p->counters[k].name), "%s", t);
            p->counters[k].value = 0;
            p->ncounters++;
        }
        if (gauge)
            p->counters[k].value = v > p->counters[k].value ? v : p->counters[k].value;
        else
            p->counters[k].value += v;
    }
}

int cluster_read_records(const char *path, presult *p)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t n;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, CLUSTER_REC_MAGIC, 8) != 0 ||
        fread(&n, 8, 1, f) != 1 || n > (1ull << 28)) {
        fclose(f);
        return -1;
    }
    cluster_rec *r = realloc(p->recs, (p->nrecs + n + 1) * sizeof(cluster_rec));
    if (!r) {
        fclose(f);
        return -1;
    }
    p->recs = r;
    if (n && fread(p->recs + p->nrecs, sizeof(cluster_rec), n, f) != n) {
        fclose(f);
        return -1;
    }
    p->nrecs += n;
    fclose(f);
    return 0;
}

/* ---- Incoming-bytes samples ---------------------------------------------------------- */

static int read_samples(const char *path, uint64_t **vals, size_t *n, uint64_t *interval)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t hdr[2];
    int ok = fread(magic, 8, 1, f) == 1 && memcmp(magic, CLUSTER_INC_MAGIC, 8) == 0 &&
             fread(hdr, 8, 2, f) == 2 && hdr[0] > 0 && hdr[0] <= (1ull << 26) && hdr[1] > 0;
    *vals = ok ? malloc(hdr[0] * sizeof(uint64_t)) : NULL;
    if (ok && (!*vals || fread(*vals, 8, hdr[0], f) != hdr[0])) ok = 0;
    fclose(f);
    if (!ok) {
        free(*vals);
        *vals = NULL;
        return -1;
    }
    *n = hdr[0];
    *interval = hdr[1];
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int cluster_incoming(const copts *o, char paths[][PATH_MAX], const int *host_of, int nfiles,
                     uint64_t limit, const char *csv_path, presult *p)
{
    uint64_t *v[CLUSTER_MAX_AGENTS] = {0};
    size_t n = 0;
    uint64_t interval = 0;
    int rc = -1;
    for (int i = 0; i < nfiles; i++) {
        size_t ni;
        uint64_t iv;
        if (read_samples(paths[i], &v[i], &ni, &iv) < 0) goto out;
        if (i == 0) {
            n = ni;
            interval = iv;
        } else if (ni != n || iv != interval) {
            goto out;
        }
    }
    if (nfiles == 0) goto out;
    /* A sample an agent missed (descheduled past its slot) repeats its
     * previous one; before its first, 0. */
    for (int i = 0; i < nfiles; i++) {
        uint64_t last = 0;
        for (size_t k = 0; k < n; k++) {
            if (v[i][k] == UINT64_MAX)
                v[i][k] = last;
            else
                last = v[i][k];
        }
    }
    size_t k0 = (size_t)(o->warmup * 1e9 / (double)interval);
    size_t k1 = (size_t)((o->warmup + o->seconds) * 1e9 / (double)interval);
    if (k1 > n) k1 = n;
    if (k0 >= k1) goto out;
    size_t per = k1 - k0;
    uint64_t *pool = malloc(per * (size_t)o->hosts * sizeof(uint64_t));
    uint64_t *host = calloc(n * (size_t)o->hosts, sizeof(uint64_t));
    if (!pool || !host) {
        free(pool);
        free(host);
        goto out;
    }
    for (int i = 0; i < nfiles; i++)
        for (size_t k = 0; k < n; k++)
            host[(size_t)host_of[i] * n + k] += v[i][k];
    size_t np = 0;
    double sum = 0;
    p->inc_over = 0;
    for (int h = 0; h < o->hosts; h++) {
        p->inc_host_max[h] = 0;
        for (size_t k = k0; k < k1; k++) {
            uint64_t x = host[(size_t)h * n + k];
            pool[np++] = x;
            sum += (double)x;
            if (x > limit) p->inc_over++;
            if (x > p->inc_host_max[h]) p->inc_host_max[h] = x;
        }
    }
    qsort(pool, np, sizeof(uint64_t), cmp_u64);
    p->inc_samples = np;
    p->inc_limit = limit;
    p->inc_mean = sum / (double)np;
    p->inc_p50 = pool[np / 2];
    p->inc_p99 = pool[(size_t)((double)(np - 1) * 0.99)];
    p->inc_max = pool[np - 1];
    if (csv_path) {
        FILE *f = fopen(csv_path, "w");
        if (f) {
            fprintf(f, "t_s");
            for (int h = 0; h < o->hosts; h++)
                fprintf(f, ",host%d", h);
            fprintf(f, "\n");
            for (size_t k = 0; k < n; k++) {
                fprintf(f, "%.6f", (double)k * (double)interval / 1e9);
                for (int h = 0; h < o->hosts; h++)
                    fprintf(f, ",%llu", (unsigned long long)host[(size_t)h * n + k]);
                fprintf(f, "\n");
            }
            fclose(f);
        }
    }
    free(pool);
    free(host);
    rc = 0;
out:
    for (int i = 0; i < nfiles; i++)
        free(v[i]);
    return rc;
}

/* ---- Analysis ----------------------------------------------------------------------- */

static double best_of(const perf_result *cal, uint32_t size)
{
    return perf_best_ns(cal, size);
}

void cluster_analyse(const copts *o, const wlgen *g, presult *p, const perf_result *own,
                     const perf_result *common, uint32_t short_max)
{
    p->res = malloc(sizeof(perf_result));
    if (!p->res) return;
    perf_result_init(p->res);
    wlgen_make_buckets(g, p->res);
    hist_init(&p->short_lat);
    hist_init(&p->short_slow);
    hist_init(&p->short_slow_common);
    hist_init(&p->lag);
    uint64_t warm = (uint64_t)(o->warmup * 1e9);
    uint64_t end = warm + (uint64_t)(o->seconds * 1e9);
    uint64_t last = end, bytes = 0, done_bytes = 0;
    for (size_t i = 0; i < p->nrecs; i++) {
        const cluster_rec *r = &p->recs[i];
        if (r->status == CREC_OK && r->done_ns >= warm && r->done_ns < end)
            done_bytes += 2ull * r->size;
        switch (r->status) {
        case CREC_OK:
            break;
        case CREC_FAILED:
            p->failed++;
            continue;
        case CREC_REFUSED:
            p->refused++;
            continue;
        case CREC_MISMATCH:
            p->mismatches++;
            continue;
        default:
            p->unfinished++;
            continue;
        }
        if (r->sched_ns < warm || r->sched_ns >= end) continue;
        p->ok++;
        uint64_t lat = r->done_ns - r->send_ns;
        bytes += 2ull * r->size;
        if (r->done_ns > last) last = r->done_ns;
        hist_record(&p->res->lat, lat);
        hist_record(&p->lag, r->send_ns > r->sched_ns ? r->send_ns - r->sched_ns : 0);
        int b = perf_bucket_of(p->res, r->size);
        hist_record(&p->res->buckets[b].lat, lat);
        double best = best_of(own, r->size);
        uint64_t sd = best > 0 ? (uint64_t)((double)lat / best * 1000.0 + 0.5) : 0;
        if (best > 0) {
            hist_record(&p->res->slow, sd);
            hist_record(&p->res->buckets[b].slow, sd);
        }
        if (r->size <= short_max) {
            p->short_rpcs++;
            hist_record(&p->short_lat, lat);
            if (best > 0) hist_record(&p->short_slow, sd);
            double bc = best_of(common, r->size);
            if (bc > 0)
                hist_record(&p->short_slow_common, (uint64_t)((double)lat / bc * 1000.0 + 0.5));
        }
    }
    p->errors = p->failed + p->refused + p->mismatches + p->unfinished;
    p->window_s = o->seconds;
    p->gbps_per_host = (double)done_bytes * 8 / o->seconds / 1e9 / o->hosts;
    double ext = (double)(last - warm) / 1e9;
    p->gbps_sched = ext > 0 ? (double)bytes * 8 / ext / 1e9 / o->hosts : 0;
}
