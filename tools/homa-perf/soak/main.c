/* homa-perf soak: the orchestrator (see soak.h and docs/homa-perf.md).
 *
 * It has no threads and no runtime, so it may fork; each worker is this
 * program exec'd afresh.  One loop: poll the workers' report pipes, move to
 * the next phase on time, restart a server when the phase says so, and at
 * each phase end collect every worker's report and sample its memory and
 * descriptors. */
#include "soak.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <homa/homa.h>

#include "json.h"
#include "pattern.h"

#define MAX_NOTES 20 /* V/D/E lines echoed to stderr */

/* Under AddressSanitizer freed memory waits in a quarantine (256 MB by
 * default), so RSS says nothing about leaks: the growth check is off. */
#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif

typedef struct worker {
    int role, index;
    pid_t pid;
    int ctl_w, rep_r;
    char buf[4096];
    size_t n;
    int ready;    /* P or READY seen */
    int reported; /* last phase with an R line */
    int done;     /* X seen */
    int eof;
    uint16_t port;
    int restarts;
    int status; /* wait status once reaped, -1 before */
} worker;

typedef struct pstat {
    uint64_t rpcs, timeouts, other_errors, bad, hangs, bytes, send_errors, retx, restarts;
    uint64_t dups, vlines, requests, server_bad, reply_errors;
    int max_in_flight;
    double max_ms;
    double stall_ms; /* longest scheduling gap of any worker */
    int first_error;
    int server_restarts;
    double seconds;
    uint64_t *rss_kb; /* per worker */
    int *fds;
} pstat;

typedef struct soak {
    soak_opts o;
    char **argv;
    int argc;
    worker w[SOAK_MAX_PROCS];
    int nw;
    soak_phase *ph;
    int nph;
    pstat *st;
    int cur; /* phase in progress (for D/V lines) */
    int failed;
    int notes;
    char first_failure[512];
} soak;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(soak *s, const char *fmt, const char *a, long b)
{
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, a, b);
    fprintf(stderr, "homa-perf soak: FAIL: %s\n", msg);
    if (!s->failed) snprintf(s->first_failure, sizeof(s->first_failure), "%s", msg);
    s->failed = 1;
}

static const char *wname(const worker *w, char *buf, size_t len)
{
    snprintf(buf, len, "%s %d (pid %d)", w->role == SOAK_ROLE_CLIENT ? "client" : "server",
             w->index, (int)w->pid);
    return buf;
}

/* Starts (or restarts) worker w: this program with the orchestrator's
 * options and the worker's own. */
static int spawn(soak *s, worker *w, int start_phase)
{
    int ctl[2], rep[2];
    if (pipe2(ctl, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0) return -1;
    char idx[16], port[16], sp[16], ports[SOAK_MAX_PROCS * 7 + 1] = "";
    snprintf(idx, sizeof(idx), "%d", w->index);
    snprintf(port, sizeof(port), "%u", (unsigned)w->port);
    snprintf(sp, sizeof(sp), "%d", start_phase);
    for (int i = 0; i < s->nw; i++) {
        if (s->w[i].role != SOAK_ROLE_SERVER) continue;
        size_t l = strlen(ports);
        snprintf(ports + l, sizeof(ports) - l, "%s%u", l ? "," : "", (unsigned)s->w[i].port);
    }
    const char *spec = "-";
    if (start_phase >= 0 && s->ph[start_phase].server_spec[0])
        spec = s->ph[start_phase].server_spec;
    char **av = calloc((size_t)s->argc + 16, sizeof(char *));
    if (av == NULL) return -1;
    int k = 0;
    av[k++] = "homa-perf";
    av[k++] = "soak-worker";
    for (int i = 2; i < s->argc; i++)
        av[k++] = s->argv[i];
    av[k++] = "--role";
    av[k++] = w->role == SOAK_ROLE_CLIENT ? "client" : "server";
    av[k++] = "--index";
    av[k++] = idx;
    if (w->role == SOAK_ROLE_SERVER) {
        av[k++] = "--port";
        av[k++] = port;
        if (start_phase >= 0) {
            av[k++] = "--start-phase";
            av[k++] = sp;
            av[k++] = "--start-spec";
            av[k++] = (char *)spec;
        }
    } else {
        av[k++] = "--ports";
        av[k++] = ports;
    }
    av[k] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        free(av);
        return -1;
    }
    if (pid == 0) {
        /* Workers must not outlive an orchestrator that dies. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (dup2(ctl[0], SOAK_CTL_FD) < 0 || dup2(rep[1], SOAK_REP_FD) < 0) _exit(126);
        execv("/proc/self/exe", av);
        _exit(127);
    }
    free(av);
    close(ctl[0]);
    close(rep[1]);
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    w->pid = pid;
    w->ctl_w = ctl[1];
    w->rep_r = rep[0];
    w->n = 0;
    w->ready = 0;
    w->done = 0;
    w->eof = 0;
    w->status = -1;
    return 0;
}

static void send_line(soak *s, worker *w, const char *line)
{
    size_t len = strlen(line);
    if (w->ctl_w < 0) return;
    if (write(w->ctl_w, line, len) != (ssize_t)len) {
        char b[64];
        fail(s, "cannot write to %s", wname(w, b, sizeof(b)), 0);
    }
}

static uint64_t kv(const char *line, const char *key)
{
    char pat[40];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

static double kvd(const char *line, const char *key)
{
    char pat[40];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : 0;
}

static void handle_line(soak *s, worker *w, const char *line)
{
    char b[64];
    if (strcmp(line, "READY") == 0) {
        w->ready = 1;
        return;
    }
    switch (line[0]) {
    case 'P':
        w->port = (uint16_t)atoi(line + 2);
        w->ready = 1;
        break;
    case 'R': {
        int p = atoi(line + 2);
        if (p < 0 || p >= s->nph) break;
        pstat *st = &s->st[p];
        if (w->role == SOAK_ROLE_CLIENT) {
            st->rpcs += kv(line, "rpcs");
            st->timeouts += kv(line, "timeouts");
            st->other_errors += kv(line, "other_errors");
            st->bad += kv(line, "bad");
            st->hangs += kv(line, "hangs");
            st->bytes += kv(line, "bytes");
            st->send_errors += kv(line, "send_errors");
            st->restarts += kv(line, "restarts");
            int mi = (int)kv(line, "max_in_flight");
            if (mi > st->max_in_flight) st->max_in_flight = mi;
            double ms = kvd(line, "max_ms");
            if (ms > st->max_ms) st->max_ms = ms;
            int fe = (int)strtol(
                strstr(line, "first_error=") ? strstr(line, "first_error=") + 12 : "0", NULL, 10);
            if (fe && !st->first_error) st->first_error = fe;
        } else {
            st->requests += kv(line, "requests");
            st->server_bad += kv(line, "bad");
            st->reply_errors += kv(line, "reply_errors");
        }
        st->retx += kv(line, "retx_bytes");
        double stall = kvd(line, "stall_ms");
        if (stall > st->stall_ms) st->stall_ms = stall;
        if (p > w->reported) w->reported = p;
        break;
    }
    case 'D':
        s->st[s->cur].dups++;
        if (s->notes++ < MAX_NOTES)
            fprintf(stderr, "homa-perf soak: duplicate delivery at %s: client/seq/why %s\n",
                    wname(w, b, sizeof(b)), line + 2);
        break;
    case 'V':
        if (strncmp(line + 2, "hang", 4) != 0) s->st[s->cur].vlines++; /* hangs: in R */
        if (s->notes++ < MAX_NOTES) fprintf(stderr, "homa-perf soak: %s\n", line + 2);
        break;
    case 'E':
        fail(s, "worker error: %s", line + 2, 0);
        break;
    case 'T':
        if (s->notes++ < MAX_NOTES)
            fprintf(stderr, "homa-perf soak: phase %d: %s\n", s->cur, line + 2);
        break;
    case 'X':
        w->done = 1;
        break;
    default:
        break;
    }
}

/* Reads what worker w has written; returns 0, or -1 at end of file. */
static int drain_worker(soak *s, worker *w)
{
    if (w->rep_r < 0) return -1;
    for (;;) {
        if (w->n >= sizeof(w->buf) - 1) w->n = 0;
        ssize_t r = read(w->rep_r, w->buf + w->n, sizeof(w->buf) - 1 - w->n);
        if (r < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (r == 0) {
            w->eof = 1;
            return -1;
        }
        w->n += (size_t)r;
        char *nl;
        while ((nl = memchr(w->buf, '\n', w->n)) != NULL) {
            *nl = '\0';
            handle_line(s, w, w->buf);
            size_t used = (size_t)(nl - w->buf) + 1;
            memmove(w->buf, nl + 1, w->n - used);
            w->n -= used;
        }
    }
}

/* Polls every report pipe until `until` (monotonic ns) or until done(s)
 * returns true.  A worker that dies is a failure (unless it was told to). */
static void pump(soak *s, uint64_t until, int (*done)(soak *, void *), void *arg)
{
    for (;;) {
        if (done != NULL && done(s, arg)) return;
        uint64_t now = mono_ns();
        if (now >= until) return;
        struct pollfd pfd[SOAK_MAX_PROCS];
        int map[SOAK_MAX_PROCS], n = 0;
        for (int i = 0; i < s->nw; i++) {
            if (s->w[i].rep_r < 0 || s->w[i].eof) continue;
            pfd[n].fd = s->w[i].rep_r;
            pfd[n].events = POLLIN;
            map[n++] = i;
        }
        uint64_t left = (until - now + 999999) / 1000000;
        int r = poll(pfd, (nfds_t)n, (int)(left > 200 ? 200 : left));
        for (int k = 0; k < n && r > 0; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            worker *w = &s->w[map[k]];
            if (drain_worker(s, w) < 0 && !w->done) {
                char b[64];
                fail(s, "%s died unexpectedly", wname(w, b, sizeof(b)), 0);
                close(w->rep_r);
                w->rep_r = -1;
            }
        }
    }
}

static int all_ready(soak *s, void *arg)
{
    int role = *(int *)arg;
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].role == role && !s->w[i].ready && s->w[i].rep_r >= 0) return 0;
    return 1;
}

static int one_ready(soak *s, void *arg)
{
    (void)s;
    return ((worker *)arg)->ready || ((worker *)arg)->rep_r < 0;
}

struct want_report {
    int phase;
    int role; /* 0 = everybody */
};

static int all_reported(soak *s, void *arg)
{
    struct want_report *wr = arg;
    for (int i = 0; i < s->nw; i++) {
        worker *w = &s->w[i];
        if (wr->role && w->role != wr->role) continue;
        if (w->rep_r >= 0 && w->reported < wr->phase) return 0;
    }
    return 1;
}

static int all_done(soak *s, void *arg)
{
    int role = *(int *)arg;
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].role == role && s->w[i].rep_r >= 0 && !s->w[i].done && !s->w[i].eof) return 0;
    return 1;
}

/* VmRSS of a process in kB, 0 if unknown. */
static uint64_t proc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0) kb = strtoull(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

static int proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void sample(soak *s, int p)
{
    for (int i = 0; i < s->nw; i++) {
        s->st[p].rss_kb[i] = proc_rss_kb(s->w[i].pid);
        s->st[p].fds[i] = proc_fds(s->w[i].pid);
    }
}

static int tolerated(const soak *s, int p)
{
    return s->ph[p].disruptive || (p > 0 && s->ph[p - 1].disruptive);
}

static void print_header(const soak *s)
{
    printf("%-5s %-17s %8s %7s %5s %4s %5s %9s %6s %6s  %s\n", "phase", "name", "RPCs", "failed",
           "dups", "bad", "hangs", "retx_MB", "max_ms", "stall",
           "RSS MB / fds per process (c.. | s..)");
    (void)s;
}

static void print_row(soak *s, int p)
{
    pstat *st = &s->st[p];
    char failed[40];
    uint64_t nf = st->timeouts + st->other_errors + st->send_errors;
    if (nf == 0)
        snprintf(failed, sizeof(failed), "0");
    else
        snprintf(failed, sizeof(failed), "%llu%s", (unsigned long long)nf,
                 st->other_errors + st->send_errors ? "!" : (tolerated(s, p) ? "t" : "T"));
    printf("%-5d %-17s %8llu %7s %5llu %4llu %5llu %9.1f %6.0f %6.0f ", p, s->ph[p].name,
           (unsigned long long)st->rpcs, failed, (unsigned long long)st->dups,
           (unsigned long long)(st->vlines), (unsigned long long)st->hangs, (double)st->retx / 1e6,
           st->max_ms, st->stall_ms);
    for (int pass = 0; pass < 2; pass++) {
        int role = pass == 0 ? SOAK_ROLE_CLIENT : SOAK_ROLE_SERVER;
        if (pass == 1) printf(" |");
        for (int i = 0; i < s->nw; i++)
            if (s->w[i].role == role)
                printf(" %.0f/%d", (double)st->rss_kb[i] / 1024.0, st->fds[i]);
    }
    if (s->ph[p].restart) printf("  (server restarted)");
    printf("\n");
    fflush(stdout);
}

/* Memory and descriptors must stop growing after warm-up.  Warm-up is the
 * first quarter of the phases (at least phase 0); the phases after it are
 * split into two halves, and for each process the largest RSS sampled in
 * the second half may exceed the largest of the first by at most
 * max(16 MB, 25 %) plus two of the largest messages (what a few more
 * messages in flight at the sampling instant explain), and its descriptor
 * count by at most 4.  Needs 8 phases after warm-up, else it is skipped. */
static void check_growth(soak *s, int nph_done)
{
#ifdef SOAK_ASAN
    printf("growth check: skipped (AddressSanitizer build: its quarantine keeps freed memory)\n");
    (void)s;
    (void)nph_done;
    return;
#endif
    int warm = nph_done / 4 > 1 ? nph_done / 4 : 1;
    int m = nph_done - warm;
    if (m < 8) {
        printf("growth check: skipped (%d phases after warm-up, needs 8)\n", m < 0 ? 0 : m);
        return;
    }
    int half = warm + m / 2, was = s->failed;
    s->failed = 0;
    for (int i = 0; i < s->nw; i++) {
        uint64_t r1 = 0, r2 = 0;
        int f1 = 0, f2 = 0;
        for (int p = warm; p < nph_done; p++) {
            uint64_t r = s->st[p].rss_kb[i];
            int f = s->st[p].fds[i];
            if (p < half) {
                if (r > r1) r1 = r;
                if (f > f1) f1 = f;
            } else {
                if (r > r2) r2 = r;
                if (f > f2) f2 = f;
            }
        }
        /* The allocator keeps a high-water mark: one moment with in_flight
         * more of the largest messages alive than ever before raises RSS
         * for good without any leak (seen: +64 MB in a 20 s run). */
        int nb = s->o.in_flight < 2 ? 2 : s->o.in_flight > 8 ? 8 : s->o.in_flight;
        uint64_t burst = (uint64_t)nb * s->o.max_size / 1024;
        uint64_t margin = (r1 / 4 > 16384 ? r1 / 4 : 16384) + burst;
        char b[64], msg[200];
        if (r2 > r1 + margin) {
            snprintf(msg, sizeof(msg),
                     "%s: RSS grew from %.1f MB (first half) to %.1f MB (allowed %.1f)",
                     wname(&s->w[i], b, sizeof(b)), (double)r1 / 1024, (double)r2 / 1024,
                     (double)(r1 + margin) / 1024);
            fail(s, "%s", msg, 0);
        }
        if (f2 > f1 + 4) {
            snprintf(msg, sizeof(msg), "%s: open descriptors grew from %d to %d",
                     wname(&s->w[i], b, sizeof(b)), f1, f2);
            fail(s, "%s", msg, 0);
        }
    }
    if (!s->failed)
        printf("growth check: RSS and descriptors of every process stable after warm-up "
               "(phases %d..%d vs %d..%d)\n",
               warm, half - 1, half, nph_done - 1);
    s->failed |= was;
}

static void json_out(soak *s, int nph_done, double secs, const pstat *tot)
{
    json_writer j;
    json_init(&j, stdout);
    json_obj_begin(&j, NULL);
    json_str(&j, "mode", "soak");
    json_bool(&j, "ok", !s->failed);
    if (s->failed) json_str(&j, "first_failure", s->first_failure);
    json_u64(&j, "clients", (uint64_t)s->o.clients);
    json_u64(&j, "servers", (uint64_t)s->o.servers);
    json_str(&j, "workload", s->o.workload);
    json_u64(&j, "max_size", s->o.max_size);
    json_u64(&j, "in_flight", (uint64_t)s->o.in_flight);
    json_u64(&j, "seed", s->o.seed);
    json_num(&j, "seconds", secs);
    json_obj_begin(&j, "totals");
    json_u64(&j, "rpcs", tot->rpcs);
    json_u64(&j, "failed", tot->timeouts + tot->other_errors + tot->send_errors);
    json_u64(&j, "timeouts", tot->timeouts);
    json_u64(&j, "other_errors", tot->other_errors + tot->send_errors);
    json_u64(&j, "duplicates", tot->dups);
    json_u64(&j, "bad", tot->vlines);
    json_u64(&j, "hangs", tot->hangs);
    json_u64(&j, "bytes", tot->bytes);
    json_u64(&j, "retransmitted_bytes", tot->retx);
    json_u64(&j, "client_restarts", tot->restarts);
    json_u64(&j, "server_restarts", (uint64_t)tot->server_restarts);
    json_u64(&j, "max_in_flight_per_server", (uint64_t)tot->max_in_flight);
    json_obj_end(&j);
    json_arr_begin(&j, "phases");
    for (int p = 0; p < nph_done; p++) {
        const pstat *st = &s->st[p];
        json_obj_begin(&j, NULL);
        json_str(&j, "name", s->ph[p].name);
        json_str(&j, "client_faults", s->ph[p].client_spec);
        json_str(&j, "server_faults", s->ph[p].server_spec);
        json_u64(&j, "rpcs", st->rpcs);
        json_u64(&j, "timeouts", st->timeouts);
        json_u64(&j, "other_errors", st->other_errors + st->send_errors);
        json_u64(&j, "duplicates", st->dups);
        json_u64(&j, "bad", st->vlines);
        json_u64(&j, "hangs", st->hangs);
        json_u64(&j, "retransmitted_bytes", st->retx);
        json_u64(&j, "client_restarts", st->restarts);
        json_num(&j, "max_ms", st->max_ms);
        json_num(&j, "max_stall_ms", st->stall_ms);
        json_arr_begin(&j, "rss_kb");
        for (int i = 0; i < s->nw; i++)
            json_u64(&j, NULL, st->rss_kb[i]);
        json_arr_end(&j);
        json_arr_begin(&j, "fds");
        for (int i = 0; i < s->nw; i++)
            json_i64(&j, NULL, st->fds[i]);
        json_arr_end(&j);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_obj_end(&j);
    fputc('\n', stdout);
}

static void reap(soak *s, worker *w, int kill_it)
{
    if (w->pid <= 0 || w->status != -1) return;
    if (kill_it) kill(w->pid, SIGKILL);
    int st = 0;
    if (waitpid(w->pid, &st, 0) == w->pid) w->status = st;
    (void)s;
}

static void close_worker(worker *w)
{
    if (w->ctl_w >= 0) close(w->ctl_w);
    if (w->rep_r >= 0) close(w->rep_r);
    w->ctl_w = w->rep_r = -1;
}

/* Kills server w and starts it again on the same port in phase p. */
static void restart_server(soak *s, worker *w, int p)
{
    char b[64];
    reap(s, w, 1);
    w->done = 1; /* its pipe's end is expected now */
    drain_worker(s, w);
    close_worker(w);
    w->done = 0;
    w->restarts++;
    int reported = w->reported;
    if (spawn(s, w, p) != 0) {
        fail(s, "cannot restart %s", wname(w, b, sizeof(b)), 0);
        return;
    }
    w->reported = reported > p - 1 ? reported : p - 1;
    pump(s, mono_ns() + 30000000000ull, one_ready, w);
    if (!w->ready) fail(s, "%s did not come back after its restart", wname(w, b, sizeof(b)), 0);
    s->st[p].server_restarts++;
}

int soak_main(int argc, char **argv)
{
    soak *s = calloc(1, sizeof(*s));
    if (s == NULL) return 1;
    int rc = soak_parse(argc, argv, 2, &s->o);
    if (rc) return rc;
    if (s->o.worker_role != SOAK_ROLE_NONE) {
        fprintf(stderr, "homa-perf soak: --role is for soak-worker only\n");
        return 2;
    }
    s->argc = argc;
    s->argv = argv;
    homa_runtime_options ro;
    char err[256];
    if (soak_runtime_options(&s->o, &ro, err, sizeof(err)) < 0) {
        fprintf(stderr, "homa-perf soak: %s\n", err);
        return 2;
    }
    const char *why = NULL;
    if (homa_config_validate(&ro.config, &why) != 0) {
        fprintf(stderr, "homa-perf soak: engine configuration: %s\n", why ? why : "invalid");
        return 2;
    }
    uint64_t timeout_ns = ro.config.tick_ns * ro.config.timeout_ticks;
    s->nph = soak_schedule(&s->o, timeout_ns, &s->ph, err, sizeof(err));
    if (s->nph < 0) {
        fprintf(stderr, "homa-perf soak: %s\n", err);
        return 1;
    }
    s->st = calloc((size_t)s->nph, sizeof(*s->st));
    if (s->st == NULL) return 1;
    for (int p = 0; p < s->nph; p++) {
        s->st[p].rss_kb = calloc(SOAK_MAX_PROCS, sizeof(uint64_t));
        s->st[p].fds = calloc(SOAK_MAX_PROCS, sizeof(int));
        if (!s->st[p].rss_kb || !s->st[p].fds) return 1;
    }
    const soak_opts *o = &s->o;
    printf("homa-perf soak: %d client(s), %d server(s), workload %s, max message %u bytes, "
           "%d in flight per client%s, %d phases of %.1f s, seed %llu, RPC timeout %.0f ms\n",
           o->clients, o->servers, o->workload, o->max_size, o->in_flight,
           o->gbps > 0 ? " (rate capped)" : "", s->nph, o->phase_seconds,
           (unsigned long long)o->seed, (double)timeout_ns / 1e6);
    if (o->faults) printf("faults (every phase after warm-up): %s\n", o->faults);
    fflush(stdout);

    /* Servers first (they pick their ports), then clients. */
    for (int i = 0; i < o->servers; i++) {
        worker *w = &s->w[s->nw++];
        *w = (worker){.role = SOAK_ROLE_SERVER,
                      .index = i,
                      .reported = -1,
                      .status = -1,
                      .ctl_w = -1,
                      .rep_r = -1};
    }
    int role = SOAK_ROLE_SERVER;
    for (int i = 0; i < o->servers; i++)
        if (spawn(s, &s->w[i], -1) != 0) fail(s, "cannot start server %s", "", i);
    pump(s, mono_ns() + 30000000000ull, all_ready, &role);
    for (int i = 0; i < o->servers; i++)
        if (!s->w[i].ready) fail(s, "server %s%ld did not start", "", i);
    /* Clients come after the servers in w[] (rows print clients first). */
    for (int i = 0; i < o->clients; i++) {
        worker *w = &s->w[s->nw++];
        *w = (worker){.role = SOAK_ROLE_CLIENT,
                      .index = i,
                      .reported = -1,
                      .status = -1,
                      .ctl_w = -1,
                      .rep_r = -1};
    }
    if (!s->failed) {
        for (int i = o->servers; i < s->nw; i++)
            if (spawn(s, &s->w[i], -1) != 0) fail(s, "cannot start client %s", "", i);
        role = SOAK_ROLE_CLIENT;
        pump(s, mono_ns() + 30000000000ull, all_ready, &role);
        for (int i = o->servers; i < s->nw; i++)
            if (!s->w[i].ready) fail(s, "client %s%ld did not start", "", i - o->servers);
    }
    print_header(s);

    uint64_t t0 = mono_ns();
    uint64_t phase_ns = (uint64_t)(o->phase_seconds * 1e9);
    uint64_t report_ns = (uint64_t)(10e9 + o->hang_seconds * 1e9 / 4);
    uint64_t rng = pattern_mix64(o->seed ^ 0x7e57a7);
    int p = 0;
    for (; p < s->nph && !s->failed; p++) {
        uint64_t start = mono_ns();
        s->cur = p;
        char line[SOAK_SPEC_LEN * 2 + 32];
        snprintf(line, sizeof(line), "F %d %s %s\n", p,
                 s->ph[p].client_spec[0] ? s->ph[p].client_spec : "-",
                 s->ph[p].server_spec[0] ? s->ph[p].server_spec : "-");
        for (int i = 0; i < s->nw; i++)
            send_line(s, &s->w[i], line);
        if (p > 0) {
            struct want_report wr = {p - 1, 0};
            pump(s, mono_ns() + report_ns, all_reported, &wr);
            for (int i = 0; i < s->nw; i++) {
                char b[64];
                if (s->w[i].rep_r >= 0 && s->w[i].reported < p - 1)
                    fail(s, "%s did not report (hung?)", wname(&s->w[i], b, sizeof(b)), 0);
            }
            s->st[p - 1].seconds = (double)(start - (t0 + (uint64_t)(p - 1) * phase_ns)) / 1e9;
            sample(s, p - 1);
            print_row(s, p - 1);
        }
        uint64_t end = t0 + (uint64_t)(p + 1) * phase_ns;
        if (s->ph[p].restart && o->servers > 0) {
            pump(s, start + (end - start) / 3, NULL, NULL);
            rng = pattern_mix64(rng + 1);
            worker *w = &s->w[rng % (uint64_t)o->servers];
            restart_server(s, w, p);
        }
        pump(s, end, NULL, NULL);
    }
    int nph_done = p;
    /* The last phase's sample: before anyone is told to stop. */
    if (nph_done > 0) sample(s, nph_done - 1);
    /* End: clients drain and report, then servers. */
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].role == SOAK_ROLE_CLIENT) send_line(s, &s->w[i], "Q\n");
    struct want_report wr = {nph_done - 1, SOAK_ROLE_CLIENT};
    uint64_t drain_until = mono_ns() + (uint64_t)(o->hang_seconds * 1e9) + 30000000000ull;
    pump(s, drain_until, all_reported, &wr);
    role = SOAK_ROLE_CLIENT;
    pump(s, drain_until, all_done, &role);
    for (int i = 0; i < s->nw; i++)
        if (s->w[i].role == SOAK_ROLE_SERVER) send_line(s, &s->w[i], "Q\n");
    wr.role = SOAK_ROLE_SERVER;
    pump(s, mono_ns() + 30000000000ull, all_reported, &wr);
    role = SOAK_ROLE_SERVER;
    pump(s, mono_ns() + 30000000000ull, all_done, &role);
    if (nph_done > 0) print_row(s, nph_done - 1);
    double secs = (double)(mono_ns() - t0) / 1e9;
    for (int i = 0; i < s->nw; i++) {
        worker *w = &s->w[i];
        char b[64];
        if (!w->done && w->rep_r >= 0) fail(s, "%s did not finish (hung?)", wname(w, b, 64), 0);
        reap(s, w, !w->done);
        if (w->done && w->status != -1 && (!WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0))
            fail(s, "%s exited with status %ld", wname(w, b, sizeof(b)),
                 WIFEXITED(w->status) ? WEXITSTATUS(w->status) : 128 + WTERMSIG(w->status));
        close_worker(w);
    }

    /* Verdict. */
    pstat tot;
    memset(&tot, 0, sizeof(tot));
    for (int q = 0; q < nph_done; q++) {
        pstat *st = &s->st[q];
        char msg[200];
        tot.rpcs += st->rpcs;
        tot.timeouts += st->timeouts;
        tot.other_errors += st->other_errors;
        tot.send_errors += st->send_errors;
        tot.bad += st->bad;
        tot.server_bad += st->server_bad;
        tot.vlines += st->vlines;
        tot.hangs += st->hangs;
        tot.dups += st->dups;
        tot.bytes += st->bytes;
        tot.retx += st->retx;
        tot.restarts += st->restarts;
        tot.server_restarts += st->server_restarts;
        if (st->max_in_flight > tot.max_in_flight) tot.max_in_flight = st->max_in_flight;
        if (st->timeouts > 0 && !tolerated(s, q)) {
            snprintf(msg, sizeof(msg),
                     "phase %d (%s): %llu RPCs failed (%s; longest stall of a process in the "
                     "phase: %.0f ms)",
                     q, s->ph[q].name, (unsigned long long)st->timeouts,
                     homa_strerror(st->first_error), st->stall_ms);
            fail(s, "%s", msg, 0);
        }
        if (st->other_errors + st->send_errors > 0) {
            snprintf(msg, sizeof(msg), "phase %d (%s): %llu RPCs failed with %s", q, s->ph[q].name,
                     (unsigned long long)(st->other_errors + st->send_errors),
                     homa_strerror(st->first_error));
            fail(s, "%s", msg, 0);
        }
    }
    if (tot.dups > 0) fail(s, "%s%ld duplicate deliveries", "", (long)tot.dups);
    if (tot.vlines > 0) fail(s, "%s%ld verification errors", "", (long)(tot.vlines));
    if (tot.hangs > 0) fail(s, "%s%ld RPCs hung", "", (long)tot.hangs);
    if (tot.rpcs == 0) fail(s, "%sno RPC completed", "", 0);
    check_growth(s, nph_done);
    printf("total: %llu RPCs (%.1f GB) in %.1f s, %llu failed (%llu timeouts, tolerated only in "
           "disruptive phases), %llu duplicates, %llu bad, %llu hangs, %.1f MB retransmitted, "
           "%llu client request restarts, %d server restarts, max %d in flight from one client "
           "to one server\n",
           (unsigned long long)tot.rpcs, (double)tot.bytes / 1e9, secs,
           (unsigned long long)(tot.timeouts + tot.other_errors + tot.send_errors),
           (unsigned long long)tot.timeouts, (unsigned long long)tot.dups,
           (unsigned long long)(tot.vlines), (unsigned long long)tot.hangs, (double)tot.retx / 1e6,
           (unsigned long long)tot.restarts, tot.server_restarts, tot.max_in_flight);
    printf("soak: %s%s%s\n", s->failed ? "FAILED: " : "PASSED", s->failed ? s->first_failure : "",
           "");
    if (o->json) json_out(s, nph_done, secs, &tot);
    int status = s->failed ? 1 : 0;
    for (int q = 0; q < s->nph; q++) {
        free(s->st[q].rss_kb);
        free(s->st[q].fds);
    }
    free(s->st);
    free(s->ph);
    free(s);
    return status;
}
