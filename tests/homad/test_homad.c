/* homad with real processes over loopback: two application processes doing
 * verified RPCs through the daemon, an application killed in the middle of
 * an RPC (reclaimed), the daemon killed (every client call fails within a
 * second; a restarted daemon takes new connections), the port policy and
 * the quotas, and a process forging its command ring (refused, then
 * disconnected, while the daemon keeps serving the others).
 *
 * Processes are started with posix_spawn (exec'd afresh: nothing is forked
 * from a process with threads). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "integration/rt_util.h"
#include "rt/homad_proto.h"
#include "support/pcap_levels.h"

extern char **environ;

static char sock_path[108];
static uint16_t base_port;
static int test_no;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static pid_t spawn(char *const argv[], int stdout_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    return pid;
}

static int can_connect(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, sock_path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* Starts homad on sock_path with extra "--key value" arguments. */
static pid_t start_daemon(const char *const *extra)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)HOMAD_EXE;
    argv[n++] = (char *)"--socket";
    argv[n++] = sock_path;
    argv[n++] = (char *)"--verbose";
    argv[n++] = (char *)"1";
    /* A loaded test machine can stall a process for a tick or a hundred:
     * don't let that fail RPCs (2 s of silence instead of 100 ms). */
    argv[n++] = (char *)"--timeout-ticks";
    argv[n++] = (char *)"2000";
    for (; extra != NULL && *extra != NULL && n < 31; extra++)
        argv[n++] = (char *)*extra;
    argv[n] = NULL;
    pid_t pid = spawn(argv, -1);
    for (int i = 0; i < 500 && !can_connect(); i++)
        sleep_ms(10);
    assert_true(can_connect());
    return pid;
}

static int wait_exit(pid_t pid, int timeout_ms)
{
    for (int i = 0; i < timeout_ms; i += 10) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void stop_daemon(pid_t pid)
{
    kill(pid, SIGTERM);
    assert_int_equal(wait_exit(pid, 5000), 0);
}

/* Starts a daemon with the default options and connects a runtime to it. */
static pid_t start_daemon_connected(homa_runtime **rt)
{
    pid_t d = start_daemon(NULL);
    assert_int_equal(homa_runtime_connect(sock_path, rt), 0);
    return d;
}

/* Destroys the test's runtime, then stops its daemon. */
static void stop_daemon_connected(homa_runtime *rt, pid_t d)
{
    homa_runtime_destroy(rt);
    stop_daemon(d);
}

/* Spawns homad_app with a pipe on its stdout and waits for "ready". */
static pid_t spawn_app_ready(const char *mode, uint16_t port, int n)
{
    char p[16], ns[16];
    snprintf(p, sizeof(p), "%u", port);
    snprintf(ns, sizeof(ns), "%d", n);
    char *argv[] = {(char *)HOMAD_APP_EXE, (char *)mode, p, ns, NULL};
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = spawn(argv, pfd[1]);
    close(pfd[1]);
    char buf[16] = {0};
    struct pollfd pp = {.fd = pfd[0], .events = POLLIN};
    assert_int_equal(poll(&pp, 1, 10000), 1);
    assert_true(read(pfd[0], buf, sizeof(buf) - 1) > 0);
    assert_non_null(strstr(buf, "ready"));
    close(pfd[0]);
    return pid;
}

static int setup(void **state)
{
    (void)state;
    snprintf(sock_path, sizeof(sock_path), "/tmp/homad-test-%d-%d.sock", (int)getpid(), test_no++);
    setenv("HOMA_DAEMON", sock_path, 1);
    /* Ports of their own per test process (other tests run in parallel). */
    base_port = (uint16_t)(20000 + (getpid() % 1400) * 32 + test_no * 4);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(sock_path);
    return 0;
}

/* Two unmodified application processes (HOMA_DAEMON in their environment)
 * do RPCs of 1 B to 1 MB to each other through homad; both verify every
 * payload. */
static void homad__two_processes_rpc(void **state)
{
    (void)state;
    pid_t d = start_daemon(NULL);
    pid_t srv = spawn_app_ready("server", base_port, 28);
    char p[16];
    snprintf(p, sizeof(p), "%u", base_port);
    char *argv[] = {(char *)HOMAD_APP_EXE, (char *)"client", p, (char *)"28", NULL};
    pid_t cli = spawn(argv, -1);
    assert_int_equal(wait_exit(cli, 60000), 0);
    assert_int_equal(wait_exit(srv, 10000), 0);
    /* The host-wide counters come from the daemon's engine. */
    homa_runtime *rt;
    assert_int_equal(homa_runtime_connect(sock_path, &rt), 0);
    homa_counters c;
    homa_runtime_counters(rt, &c, NULL);
    assert_true(c.client_completed >= 28);
    assert_true(c.server_replies >= 28);
    /* So do the cutoffs: the engine's, as an embedded runtime with the
     * same configuration reports them. */
    homa_cutoffs cut;
    memset(&cut, 0xee, sizeof(cut));
    homa_runtime_cutoffs(rt, &cut);
    const homa_config *cfg = homa_runtime_config(rt);
    assert_int_equal(cut.num_priorities, cfg->num_priorities);
    assert_true(cut.version >= 1);
    assert_int_equal(cut.unsched[0], 0x7fffffff);
    for (int i = cfg->num_priorities; i < 8; i++)
        assert_int_equal(cut.unsched[i], 0);
    assert_true(cut.max_sched_prio < cfg->num_priorities);
    homa_runtime_destroy(rt);

    /* A client with 4 threads, each with its own socket, against one
     * server: the client library's single connection is shared. */
    srv = spawn_app_ready("server", (uint16_t)(base_port + 2), 4 * 14);
    snprintf(p, sizeof(p), "%u", base_port + 2);
    char *argv4[] = {(char *)HOMAD_APP_EXE, (char *)"client", p, (char *)"14", (char *)"4", NULL};
    cli = spawn(argv4, -1);
    assert_int_equal(wait_exit(cli, 60000), 0);
    assert_int_equal(wait_exit(srv, 10000), 0);

    /* homad --stats --json lists the processes and the host's counters. */
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    char *sargv[] = {(char *)HOMAD_EXE,  (char *)"--stats", (char *)"--json",
                     (char *)"--socket", sock_path,         NULL};
    pid_t st = spawn(sargv, pfd[1]);
    close(pfd[1]);
    char buf[16384];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(buf) - 1 && (r = read(pfd[0], buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = '\0';
    close(pfd[0]);
    assert_int_equal(wait_exit(st, 10000), 0);
    assert_non_null(strstr(buf, "\"per_process\""));
    assert_non_null(strstr(buf, "\"client_completed\""));
    stop_daemon(d);
}

/* An application killed with an RPC in flight and a port open: the daemon
 * aborts its RPCs, frees the port for others and its memory. */
static void homad__app_killed_mid_rpc(void **state)
{
    (void)state;
    pid_t d = start_daemon(NULL);
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(NULL, &rt), 0); /* daemon mode via HOMA_DAEMON */
    homa_socket *sink;
    assert_int_equal(homa_socket_open(rt, (uint16_t)(base_port + 1), &sink), 0);
    pid_t victim = spawn_app_ready("hang", base_port, 1);
    /* Its request reached us: the RPC is in flight. */
    homa_msg m;
    assert_int_equal(homa_recv(sink, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
    assert_int_equal(m.length, 100000);
    assert_true(rt_check(m.data, m.length, NULL));
    homa_release(sink, &m);
    homa_socket *taken;
    assert_int_equal(homa_socket_open(rt, base_port, &taken), HOMA_ERR_PORT_IN_USE);
    homa_counters before, after;
    homa_runtime_counters(rt, &before, NULL);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    uint64_t t0 = rt_now_ns();
    int rc;
    while ((rc = homa_socket_open(rt, base_port, &taken)) == HOMA_ERR_PORT_IN_USE &&
           rt_now_ns() - t0 < 2000000000ull)
        sleep_ms(5);
    assert_int_equal(rc, 0); /* the port was given back */
    homa_runtime_counters(rt, &after, NULL);
    assert_true(after.rpcs_live < before.rpcs_live); /* its client RPC is gone */
    homa_socket_close(taken);
    homa_socket_close(sink);
    stop_daemon_connected(rt, d);
}

struct blocked {
    homa_socket *s;
    int rc;
    uint64_t returned;
};

static void *blocked_recv(void *arg)
{
    struct blocked *b = arg;
    homa_msg m;
    b->rc = homa_recv(b->s, HOMA_RECV_ANY, 0, 10000000000ll, &m);
    b->returned = rt_now_ns();
    return NULL;
}

/* The daemon dies: a call blocked in homa_recv returns HOMA_ERR_SHUTDOWN
 * within a second, later calls fail at once; a restarted daemon serves a
 * new runtime. */
static void homad__daemon_killed(void **state)
{
    (void)state;
    homa_runtime *rt;
    pid_t d = start_daemon_connected(&rt);
    homa_socket *s;
    assert_int_equal(homa_socket_open(rt, 0, &s), 0);
    struct blocked b = {.s = s, .rc = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blocked_recv, &b), 0);
    sleep_ms(300);
    uint64_t killed = rt_now_ns();
    kill(d, SIGKILL);
    waitpid(d, NULL, 0);
    pthread_join(t, NULL);
    assert_int_equal(b.rc, HOMA_ERR_SHUTDOWN);
    assert_true(b.returned - killed < 1000000000ull);
    homa_endpoint dst;
    homa_endpoint_from_host("127.0.0.1", base_port, &dst);
    uint64_t t0 = rt_now_ns();
    assert_int_equal(homa_send(s, &dst, "x", 1, 0, NULL), HOMA_ERR_SHUTDOWN);
    homa_msg m;
    assert_int_equal(homa_recv(s, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m), HOMA_ERR_SHUTDOWN);
    homa_socket *s2;
    assert_int_equal(homa_socket_open(rt, 0, &s2), HOMA_ERR_SHUTDOWN);
    assert_true(rt_now_ns() - t0 < 1000000000ull);
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    /* No daemon: HOMA_DAEMON makes runtime creation fail (with a message). */
    assert_int_equal(homa_runtime_create(NULL, &rt), HOMA_ERR_IO);

    d = start_daemon_connected(&rt); /* replaces the stale socket file */
    assert_int_equal(homa_socket_open(rt, 0, &s), 0);
    homa_socket_close(s);
    stop_daemon_connected(rt, d);
}

/* One RPC from cli to srv at `where`, answered "PONG" (checked). */
static void ping_pong(homa_socket *cli, homa_socket *srv, const homa_endpoint *where)
{
    uint64_t id;
    assert_int_equal(homa_send(cli, where, "ping", 4, 0, &id), 0);
    homa_msg m;
    assert_int_equal(homa_recv(srv, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
    assert_memory_equal(m.data, "ping", 4);
    assert_int_equal(homa_reply_msg(srv, &m, "PONG", 4), 0);
    homa_release(srv, &m);
    assert_int_equal(homa_recv(cli, HOMA_RECV_RESPONSE, id, 5000000000ll, &m), 0);
    assert_memory_equal(m.data, "PONG", 4);
    homa_release(cli, &m);
}

/* Closing a socket wakes a thread blocked in homa_recv on it, as in
 * embedded mode. */
static void homad__close_wakes_recv(void **state)
{
    (void)state;
    homa_runtime *rt;
    pid_t d = start_daemon_connected(&rt);
    homa_socket *s;
    assert_int_equal(homa_socket_open(rt, 0, &s), 0);
    /* A socket bound to one address keeps it (the Python package sends to
     * homa_socket_local() of its server sockets). */
    homa_endpoint lo;
    homa_endpoint_from_host("127.0.0.1", 0, &lo);
    homa_socket *srv;
    assert_int_equal(homa_socket_bind(rt, &lo, &srv), 0);
    homa_endpoint where;
    homa_socket_local(srv, &where);
    assert_true(homa_endpoint_is_ipv4(&where) && where.port != 0);
    ping_pong(s, srv, &where);
    uint64_t id;
    homa_msg m;
    /* A request can be dropped without a reply (abort of an odd id). */
    assert_int_equal(homa_send(s, &where, "drop", 4, 0, &id), 0);
    assert_int_equal(homa_recv(srv, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
    uint64_t req_id = m.id;
    homa_release(srv, &m);
    assert_int_equal(homa_abort(srv, req_id), 0);
    assert_int_equal(homa_abort(srv, req_id), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_reply(srv, req_id, "x", 1), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_abort(s, id), 0);
    homa_socket_close(srv);

    struct blocked b = {.s = s, .rc = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blocked_recv, &b), 0);
    sleep_ms(200);
    uint64_t t0 = rt_now_ns();
    homa_socket_close(s);
    pthread_join(t, NULL);
    assert_int_equal(b.rc, HOMA_ERR_SHUTDOWN);
    assert_true(b.returned - t0 < 1000000000ull);
    stop_daemon_connected(rt, d);
}

/* homa_sendx's priority range travels to homad with the SEND command: the
 * daemon's capture shows each request's DATA packets at its level only. */
static void homad__send_priority_range(void **state)
{
    (void)state;
    char path[] = "/tmp/homad_prio_pcap_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    setenv("HOMA_PCAP", path, 1);
    homa_runtime *rt;
    pid_t d = start_daemon_connected(&rt);
    unsetenv("HOMA_PCAP");
    homa_socket *c, *srv;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    homa_endpoint lo;
    homa_endpoint_from_host("127.0.0.1", 0, &lo);
    assert_int_equal(homa_socket_bind(rt, &lo, &srv), 0);
    homa_endpoint where;
    homa_socket_local(srv, &where);
    static uint8_t big[200000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 13 + 1);
    const unsigned flags[] = {HOMA_SEND_PRIO(6, 6), HOMA_SEND_PRIO(1, 1)};
    for (int k = 0; k < 2; k++) {
        uint64_t id;
        assert_int_equal(homa_sendx(c, &where, big, sizeof(big), 0, flags[k], &id), 0);
        homa_msg m;
        assert_int_equal(homa_recv(srv, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
        assert_int_equal(m.length, sizeof(big));
        assert_memory_equal(m.data, big, sizeof(big));
        assert_int_equal(homa_reply_msg(srv, &m, "ok", 2), 0);
        homa_release(srv, &m);
        assert_int_equal(homa_recv(c, HOMA_RECV_RESPONSE, id, 5000000000ll, &m), 0);
        homa_release(c, &m);
    }
    assert_int_equal(homa_sendx(c, &where, big, 10, 0, HOMA_SEND_PRIO(4, 3), NULL), HOMA_ERR_INVAL);
    homa_socket_close(srv);
    homa_socket_close(c);
    stop_daemon_connected(rt, d); /* homad closes its capture */
    uint64_t lv[8];
    assert_int_equal(pcap_levels(path, lv), 0);
    unlink(path);
    print_message("large packets at levels 0..7: %llu %llu %llu %llu %llu %llu %llu %llu\n",
                  (unsigned long long)lv[0], (unsigned long long)lv[1], (unsigned long long)lv[2],
                  (unsigned long long)lv[3], (unsigned long long)lv[4], (unsigned long long)lv[5],
                  (unsigned long long)lv[6], (unsigned long long)lv[7]);
    assert_true(lv[6] >= 2 && lv[1] >= 2);
    assert_int_equal(lv[6] + lv[1], levels_outside(lv, 1, 0));
}

/* Delivered messages wait per socket in two queues: homa_recv takes a
 * response by id in any order, by kind, or any in arrival order, and an
 * abort drops a response already delivered. */
static void homad__recv_by_id_kind_and_order(void **state)
{
    (void)state;
    homa_runtime *rt;
    pid_t d = start_daemon_connected(&rt);
    homa_socket *x, *y;
    assert_int_equal(homa_socket_open(rt, 0, &x), 0);
    assert_int_equal(homa_socket_open(rt, 0, &y), 0);
    homa_endpoint to_x, to_y;
    homa_endpoint_from_host("127.0.0.1", homa_socket_port(x), &to_x);
    homa_endpoint_from_host("127.0.0.1", homa_socket_port(y), &to_y);
    const unsigned settle_ms = 100 * SANITIZER_SLOWDOWN; /* homad delivers in microseconds */
    enum { N = 64 };
    uint64_t ids[N];
    homa_msg m;
    /* N responses delivered to x, then taken by id, last first. */
    for (int i = 0; i < N; i++)
        assert_int_equal(homa_send(x, &to_y, &i, sizeof(i), (uint64_t)i, &ids[i]), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(homa_recv(y, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
        assert_int_equal(homa_reply_msg(y, &m, m.data, m.length), 0);
        homa_release(y, &m);
    }
    sleep_ms(settle_ms);
    for (int i = N - 1; i >= 0; i--) {
        assert_int_equal(homa_recv(x, HOMA_RECV_RESPONSE, ids[i], 0, &m), 0);
        int v;
        assert_int_equal(m.length, sizeof(v));
        memcpy(&v, m.data, sizeof(v));
        assert_int_equal(v, i);
        assert_int_equal(m.id, ids[i]);
        homa_release(x, &m);
        assert_int_equal(homa_recv(x, HOMA_RECV_RESPONSE, ids[i], HOMA_NONBLOCK, &m),
                         HOMA_ERR_NOT_FOUND);
    }
    /* Arrival order across kinds: response 0, request 1, response 2, ... */
    uint64_t rid[6];
    for (int i = 0; i < 6; i++) {
        if (i % 2 == 0) {
            assert_int_equal(homa_send(x, &to_y, "q", 1, (uint64_t)i, &rid[i]), 0);
            assert_int_equal(homa_recv(y, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
            assert_int_equal(homa_reply_msg(y, &m, "r", 1), 0);
            homa_release(y, &m);
        } else {
            assert_int_equal(homa_send(y, &to_x, "Q", 1, (uint64_t)i, &rid[i]), 0);
        }
        sleep_ms(settle_ms);
    }
    /* The requests alone first (1, 3); then any, in arrival order:
     * responses 0, 2 and 4, then request 5. */
    for (int i = 1; i <= 3; i += 2) {
        assert_int_equal(homa_recv(x, HOMA_RECV_REQUEST, 0, 0, &m), 0);
        assert_true(m.is_request);
        assert_memory_equal(m.data, "Q", 1);
        assert_int_equal(homa_reply_msg(x, &m, "R", 1), 0);
        homa_release(x, &m);
    }
    for (int i = 0; i <= 4; i += 2) {
        assert_int_equal(homa_recv(x, HOMA_RECV_ANY, 0, 0, &m), 0);
        assert_false(m.is_request);
        assert_int_equal(m.id, rid[i]);
        homa_release(x, &m);
    }
    assert_int_equal(homa_recv(x, HOMA_RECV_ANY, 0, 0, &m), 0);
    assert_true(m.is_request);
    assert_int_equal(homa_reply_msg(x, &m, "R", 1), 0);
    homa_release(x, &m);
    /* An abort drops a response already delivered. */
    uint64_t gone;
    assert_int_equal(homa_send(x, &to_y, "a", 1, 0, &gone), 0);
    assert_int_equal(homa_recv(y, HOMA_RECV_REQUEST, 0, 5000000000ll, &m), 0);
    assert_int_equal(homa_reply_msg(y, &m, "b", 1), 0);
    homa_release(y, &m);
    sleep_ms(settle_ms);
    assert_int_equal(homa_abort(x, gone), 0);
    assert_int_equal(homa_recv(x, HOMA_RECV_RESPONSE, gone, 0, &m), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_recv(x, HOMA_RECV_ANY, 0, 0, &m), HOMA_ERR_AGAIN);
    /* y's responses from x, then nothing left anywhere. */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(homa_recv(y, HOMA_RECV_RESPONSE, 0, 5000000000ll, &m), 0);
        assert_memory_equal(m.data, "R", 1);
        homa_release(y, &m);
    }
    assert_int_equal(homa_recv(y, HOMA_RECV_ANY, 0, 0, &m), HOMA_ERR_AGAIN);
    homa_socket_close(x);
    homa_socket_close(y);
    stop_daemon_connected(rt, d);
}

/* homa_socket_fd() works in daemon mode: readable when a message may be
 * waiting, until a non-blocking homa_recv() finds nothing. */
static void homad__socket_fd(void **state)
{
    (void)state;
    homa_runtime *rt;
    pid_t d = start_daemon_connected(&rt);
    homa_socket *a, *b;
    assert_int_equal(homa_socket_open(rt, 0, &a), 0);
    assert_int_equal(homa_socket_open(rt, 0, &b), 0);
    int fd = homa_socket_fd(b);
    assert_true(fd >= 0);
    assert_int_equal(homa_socket_fd(b), fd);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 1); /* starts readable */
    homa_msg m;
    assert_int_equal(homa_recv(b, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m), HOMA_ERR_AGAIN);
    assert_int_equal(poll(&p, 1, 0), 0);
    homa_endpoint dst;
    homa_endpoint_from_host("127.0.0.1", homa_socket_port(b), &dst);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(homa_send(a, &dst, "hello", 5, 0, NULL), 0);
        assert_int_equal(poll(&p, 1, 5000), 1);
        int rc;
        while ((rc = homa_recv(b, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m)) == HOMA_ERR_AGAIN)
            assert_int_equal(poll(&p, 1, 5000), 1); /* readable again once it is here */
        assert_int_equal(rc, 0);
        assert_memory_equal(m.data, "hello", 5);
        homa_release(b, &m);
        assert_int_equal(homa_recv(b, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m), HOMA_ERR_AGAIN);
        assert_int_equal(poll(&p, 1, 0), 0);
    }
    homa_socket_close(a);
    homa_socket_close(b);
    stop_daemon_connected(rt, d);
}

/* Which user may bind which port comes from the config file; open ports
 * and client RPCs in flight are capped per process. */
static void homad__policy_and_quotas(void **state)
{
    (void)state;
    if (getuid() == 4242) skip();
    char conf[128];
    snprintf(conf, sizeof(conf), "/tmp/homad-test-%d.conf", (int)getpid());
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "# only uid 4242 may bind these\nbind 4242 %u-%u\nmax_ports = 2\n", base_port,
            base_port + 3);
    fclose(f);
    const char *extra[] = {"--config", conf, "--max-rpcs", "2", NULL};
    pid_t d = start_daemon(extra);
    unlink(conf);
    homa_runtime *rt;
    assert_int_equal(homa_runtime_connect(sock_path, &rt), 0);
    homa_socket *s1, *s2, *s3;
    assert_int_equal(homa_socket_open(rt, base_port, &s1), HOMA_ERR_PERM);
    assert_int_equal(homa_socket_open(rt, (uint16_t)(base_port + 10), &s1), HOMA_ERR_PERM);
    assert_int_equal(homa_socket_open(rt, 0, &s1), 0); /* ephemeral: always allowed */
    assert_int_equal(homa_socket_open(rt, 0, &s2), 0);
    assert_int_equal(homa_socket_open(rt, 0, &s3), HOMA_ERR_LIMIT);
    /* s2 never answers: RPCs to it stay in flight. */
    homa_endpoint dst;
    homa_endpoint_from_host("127.0.0.1", homa_socket_port(s2), &dst);
    uint64_t id1, id2;
    assert_int_equal(homa_send(s1, &dst, "a", 1, 0, &id1), 0);
    assert_int_equal(homa_send(s1, &dst, "b", 1, 0, &id2), 0);
    assert_int_equal(homa_send(s1, &dst, "c", 1, 0, NULL), HOMA_ERR_LIMIT);
    assert_int_equal(homa_abort(s1, id1), 0);
    assert_int_equal(homa_send(s1, &dst, "d", 1, 0, NULL), 0);
    homa_socket_close(s1);
    homa_socket_close(s2);
    stop_daemon_connected(rt, d);
}

/* homa_socket_set_class through homad: in range it is taken and RPCs go
 * on; out of range it is HOMA_ERR_INVAL; above --max-class it is
 * HOMA_ERR_PERM for a process that is not root (a child that becomes uid
 * 4242 when the test runs as root), counted in perm_refusals. */
static void homad__sched_class(void **state)
{
    (void)state;
    const char *extra[] = {"--max-class", "1", NULL};
    pid_t d = start_daemon(extra);
    /* (forked before this process has runtime threads) */
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        /* Not root (any more): classes above --max-class are refused. */
        if (getuid() == 0 && (setgid(4242) != 0 || setuid(4242) != 0)) _exit(10);
        homa_runtime *krt;
        homa_socket *ks;
        if (homa_runtime_connect(sock_path, &krt) != 0) _exit(11);
        if (homa_socket_open(krt, 0, &ks) != 0) _exit(12);
        if (homa_socket_set_class(ks, 1) != 0) _exit(13);
        if (homa_socket_set_class(ks, 2) != HOMA_ERR_PERM) _exit(14);
        homa_socket_close(ks);
        homa_runtime_destroy(krt);
        _exit(0);
    }
    assert_int_equal(wait_exit(kid, 10000), 0);
    homa_runtime *rt;
    assert_int_equal(homa_runtime_connect(sock_path, &rt), 0);
    homa_socket *c, *srv;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    assert_int_equal(homa_socket_open(rt, 0, &srv), 0);
    assert_int_equal(homa_socket_set_class(c, HOMA_SCHED_CLASSES), HOMA_ERR_INVAL);
    assert_int_equal(homa_socket_set_class(c, -1), HOMA_ERR_INVAL);
    assert_int_equal(homa_socket_set_class(c, 1), 0);
    assert_int_equal(homa_socket_set_class(srv, 1), 0);
    if (getuid() == 0) assert_int_equal(homa_socket_set_class(c, 3), 0);
    homa_endpoint where;
    homa_endpoint_from_host("127.0.0.1", homa_socket_port(srv), &where);
    ping_pong(c, srv, &where);
    homa_socket_close(srv);
    homa_socket_close(c);
    stop_daemon_connected(rt, d);
}

/* A process that writes its own commands: refused ones get an error, an
 * impossible ring index gets it disconnected, the others are unaffected. */
static void homad__forged_commands(void **state)
{
    (void)state;
    pid_t d = start_daemon(NULL);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, sock_path);
    /* A connection that never says HELLO is dropped after a second. */
    int silent = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(silent, (struct sockaddr *)&sa, sizeof(sa)), 0);
    uint64_t silent_t0 = rt_now_ns();
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct homad_hello hello = {HOMAD_MAGIC, HOMAD_VERSION};
    assert_int_equal(send(fd, &hello, sizeof(hello), 0), sizeof(hello));
    struct homad_welcome wel;
    char cbuf[CMSG_SPACE(3 * sizeof(int))];
    struct iovec iov = {&wel, sizeof(wel)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    assert_int_equal(recvmsg(fd, &mh, 0), sizeof(wel));
    assert_int_equal(wel.result, 0);
    int fds[3];
    memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(fds));
    void *base = mmap(NULL, wel.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    assert_true(base != MAP_FAILED);
    /* The region is sealed: it cannot be shrunk under the daemon. */
    assert_int_not_equal(ftruncate(fds[0], 4096), 0);
    struct homad_hdr h;
    memcpy(&h, base, sizeof(h));
    assert_int_equal(homad_hdr_check(&h, wel.region_bytes), 0);
    struct homad_view v;
    homad_view_init(&v, base, &h);
    uint32_t head = 0, tail = 0;
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_SEND; /* slot out of range */
    c.port = 5;
    c.peer_port = 6;
    c.slot = h.ntx;
    c.tag = 1;
    homad_cmd_push(&v, head++, &c);
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_RELEASE; /* a slot it was never given: no answer */
    c.slot = 0;
    homad_cmd_push(&v, head++, &c);
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_CLOSE; /* a port it does not own */
    c.port = 1;
    c.tag = 2;
    homad_cmd_push(&v, head++, &c);
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_COUNTERS;
    c.tag = 3;
    homad_cmd_push(&v, head++, &c);
    uint64_t one = 1;
    assert_int_equal(write(fds[1], &one, sizeof(one)), sizeof(one));
    int want[3][2] = {{1, HOMA_ERR_INVAL}, {2, HOMA_ERR_NO_PORT}, {3, 0}};
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = rt_now_ns();
        while (homad_cq_avail(&v, tail) == 0 && rt_now_ns() - t0 < 2000000000ull)
            sleep_ms(1);
        struct homad_cqe e;
        assert_int_equal(homad_cq_avail(&v, tail) > 0, 1);
        homad_cq_copy(&v, tail++, &e);
        homad_cq_consumed(&v, tail);
        assert_int_equal(e.kind, HOMAD_CQ_DONE);
        assert_int_equal(e.tag, want[i][0]);
        assert_int_equal(e.result, want[i][1]);
    }
    assert_int_equal(v.ctrs->proc.bad_commands, 3);
    /* An impossible head: disconnected within a second. */
    __atomic_store_n(&v.ctrl->cmd_head, head + 100000, __ATOMIC_RELEASE);
    assert_int_equal(write(fds[1], &one, sizeof(one)), sizeof(one));
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 1000), 1);
    char b;
    assert_int_equal(recv(fd, &b, 1, MSG_DONTWAIT), 0);
    /* Others are still served. */
    homa_runtime *rt;
    assert_int_equal(homa_runtime_connect(sock_path, &rt), 0);
    homa_socket *s;
    assert_int_equal(homa_socket_open(rt, 0, &s), 0);
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    munmap(base, wel.region_bytes);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    close(fd);
    struct pollfd sp = {.fd = silent, .events = POLLIN};
    assert_int_equal(poll(&sp, 1, 3000), 1);
    assert_int_equal(recv(silent, &b, 1, MSG_DONTWAIT), 0);
    assert_true(rt_now_ns() - silent_t0 >= 900000000ull);
    close(silent);
    stop_daemon(d);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(homad__two_processes_rpc, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__app_killed_mid_rpc, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__daemon_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__close_wakes_recv, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__send_priority_range, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__recv_by_id_kind_and_order, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__socket_fd, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__policy_and_quotas, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__sched_class, setup, teardown),
        cmocka_unit_test_setup_teardown(homad__forged_commands, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
