/* The public API of homa/homa.h: each call checks its arguments here, once
 * for every mode, and then asks the runtime's backend (rt.h: embedded,
 * driven, or homad) to do it.  The argument checks and the contracts they
 * enforce are documented in homa.h; what each backend does, in rt.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/homa.h>

#include "rt/rt.h"

/* -------------------------------------------------------------- runtime */

int homa_runtime_create(const homa_runtime_options *opts, homa_runtime **out)
{
    if (out == NULL) return HOMA_ERR_INVAL;
    homa_runtime_options o;
    if (opts != NULL)
        o = *opts;
    else
        homa_runtime_options_default(&o);
    if (!(o.flags & HOMA_RT_IGNORE_ENV)) {
        int rc = homa_rt_env_options(&o);
        if (rc != 0) return rc;
        const char *daemon = getenv("HOMA_DAEMON");
        if (daemon != NULL && daemon[0] != '\0' && !(o.flags & HOMA_RT_EMBEDDED)) {
            rc = homa_rt_homad_connect(daemon, o.busy_poll_us, out);
            if (rc != 0)
                fprintf(stderr, "libhoma: HOMA_DAEMON=%s: no homad there (%s)\n", daemon,
                        homa_strerror(rc));
            return rc;
        }
    }
    return homa_rt_embedded_create(&o, 0, out);
}

int homa_runtime_connect(const char *socket_path, homa_runtime **out)
{
    return homa_rt_homad_connect(socket_path, 50, out);
}

static homa_runtime *default_rt;
static int default_rc;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void)
{
    default_rc = homa_runtime_create(NULL, &default_rt);
}

int homa_runtime_default(homa_runtime **out)
{
    pthread_once(&default_once, default_init);
    if (default_rc == 0) *out = default_rt;
    return default_rc;
}

const homa_config *homa_runtime_config(const homa_runtime *rt)
{
    return &rt->cfg;
}

void homa_runtime_destroy(homa_runtime *rt)
{
    if (rt == NULL) return;
    while (rt->socks != NULL)
        homa_socket_close(rt->socks);
    rt->be->destroy(rt);
}

void homa_runtime_counters(homa_runtime *rt, homa_counters *engine, homa_driver_counters *driver)
{
    rt->be->counters(rt, engine, driver);
}

int homa_runtime_set_faults(homa_runtime *rt, const homa_faults *faults)
{
    if (rt == NULL) return HOMA_ERR_INVAL;
    homa_faults none;
    memset(&none, 0, sizeof(none));
    none.delay_us = 1000;
    const homa_faults *f = faults != NULL ? faults : &none;
    /* The checks homa_faults_parse() makes, for structs filled by hand. */
    double sum = f->drop + f->dup + f->reorder + f->delay;
    if (!(f->drop >= 0 && f->dup >= 0 && f->reorder >= 0 && f->delay >= 0) || sum > 1.0 + 1e-9 ||
        f->jitter_us > f->delay_us || f->reorder_depth > 1000 ||
        (f->blackout_every_ns != 0 && f->blackout_every_ns <= f->blackout_ns))
        return HOMA_ERR_INVAL;
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++)
        if (!(f->drop_class[c] >= 0 && f->drop_class[c] <= 1)) return HOMA_ERR_INVAL;
    return rt->be->set_faults(rt, f);
}

void homa_runtime_cutoffs(homa_runtime *rt, homa_cutoffs *out)
{
    rt->be->cutoffs(rt, out);
}

/* -------------------------------------------------------------- sockets */

int homa_socket_bind(homa_runtime *rt, const homa_endpoint *local, homa_socket **out)
{
    if (local == NULL || out == NULL) return HOMA_ERR_INVAL;
    if (rt == NULL) {
        int rc = homa_runtime_default(&rt);
        if (rc != 0) return rc;
    }
    homa_socket *s = calloc(1, sizeof(*s));
    if (s == NULL) return HOMA_ERR_NOMEM;
    s->rt = rt;
    s->efd = -1;
    int rc = rt->be->open(s, local);
    if (rc != 0) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int homa_socket_open(homa_runtime *rt, uint16_t port, homa_socket **out)
{
    homa_endpoint any;
    memset(&any, 0, sizeof(any));
    any.port = port;
    return homa_socket_bind(rt, &any, out);
}

void homa_socket_close(homa_socket *s)
{
    if (s == NULL) return;
    s->rt->be->close(s);
    free(s);
}

int homa_socket_linger(homa_socket *s, int64_t timeout_ns)
{
    if (s == NULL || (timeout_ns < 0 && timeout_ns != HOMA_FOREVER)) return HOMA_ERR_INVAL;
    return s->rt->be->linger(s, timeout_ns);
}

int homa_socket_set_class(homa_socket *s, int sched_class)
{
    if (s == NULL || sched_class < 0 || sched_class >= HOMA_SCHED_CLASSES) return HOMA_ERR_INVAL;
    return s->rt->be->set_class(s, sched_class);
}

uint16_t homa_socket_port(const homa_socket *s)
{
    return s->port;
}

void homa_socket_local(const homa_socket *s, homa_endpoint *out)
{
    *out = s->local;
}

homa_runtime *homa_socket_runtime(const homa_socket *s)
{
    return s->rt;
}

int homa_socket_fd(homa_socket *s)
{
    return s->rt->be->fd(s);
}

/* ----------------------------------------------------------------- RPCs */

/* prio: -1, or lo | hi << 4 (a HOMA_SEND_PRIO range, checked against 0..7). */
static int send_common(homa_socket *s, const homa_endpoint *dst, const void *buf, void *owned,
                       size_t len, uint64_t cookie, int prio, uint64_t *id)
{
    if (s == NULL || dst == NULL || (buf == NULL && owned == NULL && len > 0))
        return HOMA_ERR_INVAL;
    return s->rt->be->send(s, dst, buf, owned, len, cookie, prio, id);
}

int homa_send(homa_socket *s, const homa_endpoint *dst, const void *buf, size_t len,
              uint64_t cookie, uint64_t *id)
{
    return send_common(s, dst, buf, NULL, len, cookie, -1, id);
}

int homa_send_owned(homa_socket *s, const homa_endpoint *dst, void *buf, size_t len,
                    uint64_t cookie, uint64_t *id)
{
    if (buf == NULL) return HOMA_ERR_INVAL;
    return send_common(s, dst, NULL, buf, len, cookie, -1, id);
}

int homa_sendx(homa_socket *s, const homa_endpoint *dst, void *buf, size_t len, uint64_t cookie,
               unsigned flags, uint64_t *id)
{
    if (flags & ~(HOMA_SEND_OWNED | HOMA_SEND_PRIO(15, 15))) return HOMA_ERR_INVAL;
    int prio = -1;
    if (flags & HOMA_SEND_PRIO(0, 0)) {
        unsigned lo = (flags >> 8) & 0xfu, hi = (flags >> 12) & 0xfu;
        if (lo > hi || hi > 7) return HOMA_ERR_INVAL;
        prio = (int)(lo | hi << 4);
    } else if (flags & 0xff00u) {
        return HOMA_ERR_INVAL; /* a range without HOMA_SEND_PRIO */
    }
    if (flags & HOMA_SEND_OWNED) {
        if (buf == NULL) return HOMA_ERR_INVAL;
        return send_common(s, dst, NULL, buf, len, cookie, prio, id);
    }
    return send_common(s, dst, buf, NULL, len, cookie, prio, id);
}

/* peer NULL: the client of the one unanswered request `id`. */
static int reply_common(homa_socket *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                        const void *buf, void *owned, size_t len)
{
    if (s == NULL || (buf == NULL && owned == NULL && len > 0)) return HOMA_ERR_INVAL;
    return s->rt->be->reply(s, peer, peer_port, id, buf, owned, len);
}

int homa_reply(homa_socket *s, uint64_t id, const void *buf, size_t len)
{
    return reply_common(s, NULL, 0, id, buf, NULL, len);
}

int homa_reply_msg(homa_socket *s, const homa_msg *req, const void *buf, size_t len)
{
    if (req == NULL) return HOMA_ERR_INVAL;
    return reply_common(s, &req->peer, req->peer_port, req->id, buf, NULL, len);
}

int homa_reply_msg_owned(homa_socket *s, const homa_msg *req, void *buf, size_t len)
{
    if (req == NULL || buf == NULL) return HOMA_ERR_INVAL;
    return reply_common(s, &req->peer, req->peer_port, req->id, NULL, buf, len);
}

int homa_reply_to(homa_socket *s, const homa_endpoint *peer, uint64_t id, const void *buf,
                  size_t len)
{
    if (peer == NULL) return HOMA_ERR_INVAL;
    return reply_common(s, &peer->addr, peer->port, id, buf, NULL, len);
}

void *homa_msg_take(homa_socket *s, homa_msg *msg)
{
    if (s == NULL || msg == NULL || msg->handle == NULL) return NULL;
    return s->rt->be->msg_take(s, msg);
}

int homa_abort(homa_socket *s, uint64_t id)
{
    if (s == NULL) return HOMA_ERR_INVAL;
    return s->rt->be->abort(s, id);
}

void homa_release(homa_socket *s, homa_msg *msg)
{
    if (s == NULL || msg == NULL || msg->handle == NULL) return;
    s->rt->be->release(s, msg);
}

int homa_recv(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns, homa_msg *msg)
{
    if (s == NULL || msg == NULL || (id == 0 && (flags & HOMA_RECV_ANY) == 0))
        return HOMA_ERR_INVAL;
    memset(msg, 0, sizeof(*msg));
    return s->rt->be->recv(s, flags, id, timeout_ns, msg);
}

int homa_call(homa_socket *s, const homa_endpoint *dst, const void *req, size_t len,
              int64_t timeout_ns, homa_msg *resp)
{
    uint64_t id;
    int rc = homa_send(s, dst, req, len, 0, &id);
    if (rc != 0) return rc;
    rc = homa_recv(s, HOMA_RECV_RESPONSE, id, timeout_ns, resp);
    if (rc == HOMA_ERR_AGAIN) homa_abort(s, id);
    return rc;
}
