/* An application process for the homad tests: plain libhoma API, daemon mode
 * chosen by the environment (HOMA_DAEMON), exactly as an unmodified
 * application would run.
 *
 *   homad_app server PORT N      answer N requests: reply = request bytes
 *                                reversed (payload verified first)
 *   homad_app client PORT N [T]  N verified RPCs to 127.0.0.1:PORT, sizes
 *                                from 1 byte to 1 MB, in each of T threads
 *                                (default 1), each with its own socket
 *   homad_app hang PORT          open PORT, send a request to PORT+1 (nobody
 *                                answers), print "ready", sleep (to be killed)
 *
 * Exit 0 on success; messages on stderr otherwise. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

static int fail(const char *what, int rc)
{
    fprintf(stderr, "homad_app: %s: %s\n", what, homa_strerror(rc));
    return 1;
}

static void reverse(const uint8_t *in, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[n - 1 - i];
}

static int server(homa_socket *s, int n)
{
    uint8_t *out = malloc(1u << 20);
    for (int i = 0; i < n; i++) {
        homa_msg m;
        int rc = homa_recv(s, HOMA_RECV_REQUEST, 0, 20 * 1000000000ll, &m);
        if (rc != 0) return fail("server recv", rc);
        uint64_t tag = (uint64_t)m.length;
        if (!rt_check(m.data, m.length, &tag)) {
            fprintf(stderr, "homad_app: server: request %d corrupt (%zu bytes)\n", i, m.length);
            return 1;
        }
        reverse(m.data, out, m.length);
        rc = homa_reply_msg(s, &m, out, m.length);
        homa_release(s, &m);
        if (rc != 0) return fail("server reply", rc);
    }
    int rc = homa_socket_linger(s, 5 * 1000000000ll);
    free(out);
    return rc == 0 ? 0 : fail("server linger", rc);
}

static int client(homa_socket *s, uint16_t port, int n)
{
    static const size_t sizes[] = {1, 100, 1400, 5000, 70000, 300000, 1000000};
    homa_endpoint dst;
    homa_endpoint_from_host("127.0.0.1", port, &dst);
    uint8_t *req = malloc(1u << 20), *want = malloc(1u << 20);
    for (int i = 0; i < n; i++) {
        size_t len = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
        uint64_t tag = len < 8 ? len : (uint64_t)i * 7919u + len;
        rt_fill(req, len, tag);
        homa_msg m;
        int rc = homa_call(s, &dst, req, len, 20 * 1000000000ll, &m);
        if (rc != 0) return fail("client call", rc);
        reverse(req, want, len);
        if (m.length != len || memcmp(m.data, want, len) != 0) {
            fprintf(stderr, "homad_app: client: response %d wrong (%zu bytes, want %zu)\n", i,
                    m.length, len);
            return 1;
        }
        homa_release(s, &m);
    }
    free(req);
    free(want);
    return 0;
}

struct worker {
    homa_runtime *rt;
    uint16_t port;
    int n;
    int rc;
};

static void *client_thread(void *arg)
{
    struct worker *w = arg;
    homa_socket *s;
    w->rc = homa_socket_open(w->rt, 0, &s);
    if (w->rc != 0) return NULL;
    w->rc = client(s, w->port, w->n);
    homa_socket_close(s);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: homad_app server|client|hang PORT [N]\n");
        return 2;
    }
    uint16_t port = (uint16_t)atoi(argv[2]);
    int n = argc > 3 ? atoi(argv[3]) : 1;
    homa_runtime *rt;
    int rc = homa_runtime_create(NULL, &rt);
    if (rc != 0) return fail("runtime", rc);
    homa_socket *s;
    int is_client = strcmp(argv[1], "client") == 0;
    rc = homa_socket_open(rt, is_client ? 0 : port, &s);
    if (rc != 0) return fail("socket", rc);
    if (strcmp(argv[1], "server") == 0) {
        printf("ready\n");
        fflush(stdout);
        rc = server(s, n);
    } else if (is_client) {
        int nt = argc > 4 ? atoi(argv[4]) : 1;
        if (nt <= 1) {
            rc = client(s, port, n);
        } else {
            struct worker w[16];
            pthread_t t[16];
            if (nt > 16) nt = 16;
            for (int i = 0; i < nt; i++) {
                w[i] = (struct worker){.rt = rt, .port = port, .n = n};
                pthread_create(&t[i], NULL, client_thread, &w[i]);
            }
            for (int i = 0; i < nt; i++) {
                pthread_join(t[i], NULL);
                if (w[i].rc != 0) rc = w[i].rc;
            }
        }
    } else if (strcmp(argv[1], "hang") == 0) {
        homa_endpoint dst;
        homa_endpoint_from_host("127.0.0.1", (uint16_t)(port + 1), &dst);
        uint8_t buf[100000];
        rt_fill(buf, sizeof(buf), 1);
        rc = homa_send(s, &dst, buf, sizeof(buf), 0, NULL);
        if (rc != 0) return fail("hang send", rc);
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    } else {
        return 2;
    }
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    return rc;
}
