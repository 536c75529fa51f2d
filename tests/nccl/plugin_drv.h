/* Test-side driver for libnccl-net-homa: dlopens the plugin, picks one
 * ncclNetPlugin_vN table and calls it through version-independent helpers
 * (as NCCL's proxy thread would), so every test can run against v8..v11.
 * Header-only: shared by the harness and the benchmark. */
#ifndef HOMA_TESTS_NCCL_PLUGIN_DRV_H
#define HOMA_TESTS_NCCL_PLUGIN_DRV_H

#include "../../nccl/nccl_net_abi.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct drv {
    int ver;
    const ncclNet_v8_t *n8;
    const ncclNet_v9_t *n9;
    const ncclNet_v10_t *n10;
    const ncclNet_v11_t *n11;
    void *ctx; /* v11 */
    int tc;    /* v10+: the traffic class given to connect (v10) or init (v11) */
} drv;

static inline void drv_logger(ncclDebugLogLevel level, unsigned long flags, const char *file,
                              int line, const char *fmt, ...)
{
    (void)flags;
    if (level > NCCL_LOG_WARN && !getenv("NCCL_HOMA_TEST_VERBOSE")) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[plugin %s:%d] ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Loads the plugin and the table of version ver; 0 or -1 (message on stderr). */
static inline int drv_open(drv *d, const char *path, int ver)
{
    memset(d, 0, sizeof(*d));
    d->ver = ver;
    d->tc = NCCL_NET_TRAFFIC_CLASS_UNDEF;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    char sym[32];
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", ver);
    void *t = dlsym(h, sym);
    if (!t) {
        fprintf(stderr, "dlsym %s: %s\n", sym, dlerror());
        return -1;
    }
    switch (ver) {
    case 8:
        d->n8 = t;
        break;
    case 9:
        d->n9 = t;
        break;
    case 10:
        d->n10 = t;
        break;
    case 11:
        d->n11 = t;
        break;
    default:
        return -1;
    }
    return 0;
}

static inline const char *drv_name(const drv *d)
{
    switch (d->ver) {
    case 8:
        return d->n8->name;
    case 9:
        return d->n9->name;
    case 10:
        return d->n10->name;
    default:
        return d->n11->name;
    }
}

static inline ncclResult_t drv_init(drv *d)
{
    ncclNetCommConfig_v11_t cfg = {d->tc};
    switch (d->ver) {
    case 8:
        return d->n8->init(drv_logger);
    case 9:
        return d->n9->init(drv_logger);
    case 10:
        return d->n10->init(drv_logger, NULL);
    default:
        return d->n11->init(&d->ctx, 42, &cfg, drv_logger, NULL);
    }
}

static inline ncclResult_t drv_devices(drv *d, int *n)
{
    switch (d->ver) {
    case 8:
        return d->n8->devices(n);
    case 9:
        return d->n9->devices(n);
    case 10:
        return d->n10->devices(n);
    default:
        return d->n11->devices(n);
    }
}

/* Common view of the properties (v9 layout; v8 leaves the v9 fields 0). */
static inline ncclResult_t drv_props(drv *d, int dev, ncclNetProperties_v11_t *p)
{
    memset(p, 0, sizeof(*p));
    ncclResult_t rc;
    if (d->ver == 8) {
        ncclNetProperties_v8_t q;
        rc = d->n8->getProperties(dev, &q);
        p->name = q.name;
        p->pciPath = q.pciPath;
        p->guid = q.guid;
        p->ptrSupport = q.ptrSupport;
        p->speed = q.speed;
        p->maxComms = q.maxComms;
        p->maxRecvs = q.maxRecvs;
        p->netDeviceType = q.netDeviceType;
        return rc;
    }
    if (d->ver == 11) return d->n11->getProperties(dev, p);
    ncclNetProperties_v9_t q;
    rc = d->ver == 9 ? d->n9->getProperties(dev, &q) : d->n10->getProperties(dev, &q);
    memcpy(p, &q, sizeof(q)); /* v11 extends v9 at the end */
    return rc;
}

static inline ncclResult_t drv_listen(drv *d, int dev, void *handle, void **l)
{
    switch (d->ver) {
    case 8:
        return d->n8->listen(dev, handle, l);
    case 9:
        return d->n9->listen(dev, handle, l);
    case 10:
        return d->n10->listen(dev, handle, l);
    default:
        return d->n11->listen(d->ctx, dev, handle, l);
    }
}

static inline ncclResult_t drv_connect(drv *d, int dev, void *handle, void **s)
{
    ncclNetDeviceHandle_v8_t *dh = NULL;
    ncclNetCommConfig_v10_t cfg = {d->tc};
    switch (d->ver) {
    case 8:
        return d->n8->connect(dev, handle, s, &dh);
    case 9:
        return d->n9->connect(dev, handle, s, &dh);
    case 10:
        return d->n10->connect(dev, &cfg, handle, s, &dh);
    default:
        return d->n11->connect(d->ctx, dev, handle, s, &dh);
    }
}

static inline ncclResult_t drv_accept(drv *d, void *l, void **r)
{
    ncclNetDeviceHandle_v8_t *dh = NULL;
    switch (d->ver) {
    case 8:
        return d->n8->accept(l, r, &dh);
    case 9:
        return d->n9->accept(l, r, &dh);
    case 10:
        return d->n10->accept(l, r, &dh);
    default:
        return d->n11->accept(l, r, &dh);
    }
}

static inline ncclResult_t drv_regmr(drv *d, void *comm, void *data, size_t size, int type,
                                     void **mh)
{
    switch (d->ver) {
    case 8:
        return d->n8->regMr(comm, data, size, type, mh);
    case 9:
        return d->n9->regMr(comm, data, size, type, mh);
    case 10:
        return d->n10->regMr(comm, data, size, type, mh);
    default:
        return d->n11->regMr(comm, data, size, type, mh);
    }
}

static inline ncclResult_t drv_regmr_dmabuf(drv *d, void *comm, void *data, size_t size, void **mh)
{
    switch (d->ver) {
    case 8:
        return d->n8->regMrDmaBuf(comm, data, size, NCCL_PTR_CUDA, 0, -1, mh);
    case 9:
        return d->n9->regMrDmaBuf(comm, data, size, NCCL_PTR_CUDA, 0, -1, mh);
    case 10:
        return d->n10->regMrDmaBuf(comm, data, size, NCCL_PTR_CUDA, 0, -1, mh);
    default:
        return d->n11->regMrDmaBuf(comm, data, size, NCCL_PTR_CUDA, 0, -1, mh);
    }
}

static inline ncclResult_t drv_deregmr(drv *d, void *comm, void *mh)
{
    switch (d->ver) {
    case 8:
        return d->n8->deregMr(comm, mh);
    case 9:
        return d->n9->deregMr(comm, mh);
    case 10:
        return d->n10->deregMr(comm, mh);
    default:
        return d->n11->deregMr(comm, mh);
    }
}

static inline ncclResult_t drv_isend(drv *d, void *s, void *data, size_t size, int tag, void *mh,
                                     void **req)
{
    switch (d->ver) {
    case 8:
        return d->n8->isend(s, data, (int)size, tag, mh, req);
    case 9:
        return d->n9->isend(s, data, size, tag, mh, req);
    case 10:
        return d->n10->isend(s, data, size, tag, mh, NULL, req);
    default:
        return d->n11->isend(s, data, size, tag, mh, NULL, req);
    }
}

/* n receives (n > 1 only to check that the plugin refuses it). */
static inline ncclResult_t drv_irecv_n(drv *d, void *r, int n, void **data, size_t *sizes,
                                       int *tags, void **mhs, void **req)
{
    int isz[8];
    for (int i = 0; i < n && i < 8; i++)
        isz[i] = (int)sizes[i];
    void *ph[8] = {0};
    switch (d->ver) {
    case 8:
        return d->n8->irecv(r, n, data, isz, tags, mhs, req);
    case 9:
        return d->n9->irecv(r, n, data, sizes, tags, mhs, req);
    case 10:
        return d->n10->irecv(r, n, data, sizes, tags, mhs, ph, req);
    default:
        return d->n11->irecv(r, n, data, sizes, tags, mhs, ph, req);
    }
}

static inline ncclResult_t drv_irecv(drv *d, void *r, void *data, size_t size, int tag, void *mh,
                                     void **req)
{
    return drv_irecv_n(d, r, 1, &data, &size, &tag, &mh, req);
}

static inline ncclResult_t drv_iflush(drv *d, void *r, void *data, int size, void *mh, void **req)
{
    switch (d->ver) {
    case 8:
        return d->n8->iflush(r, 1, &data, &size, &mh, req);
    case 9:
        return d->n9->iflush(r, 1, &data, &size, &mh, req);
    case 10:
        return d->n10->iflush(r, 1, &data, &size, &mh, req);
    default:
        return d->n11->iflush(r, 1, &data, &size, &mh, req);
    }
}

static inline ncclResult_t drv_test(drv *d, void *req, int *done, int *size)
{
    switch (d->ver) {
    case 8:
        return d->n8->test(req, done, size);
    case 9:
        return d->n9->test(req, done, size);
    case 10:
        return d->n10->test(req, done, size);
    default:
        return d->n11->test(req, done, size);
    }
}

static inline ncclResult_t drv_close_send(drv *d, void *s)
{
    switch (d->ver) {
    case 8:
        return d->n8->closeSend(s);
    case 9:
        return d->n9->closeSend(s);
    case 10:
        return d->n10->closeSend(s);
    default:
        return d->n11->closeSend(s);
    }
}

static inline ncclResult_t drv_close_recv(drv *d, void *r)
{
    switch (d->ver) {
    case 8:
        return d->n8->closeRecv(r);
    case 9:
        return d->n9->closeRecv(r);
    case 10:
        return d->n10->closeRecv(r);
    default:
        return d->n11->closeRecv(r);
    }
}

static inline ncclResult_t drv_close_listen(drv *d, void *l)
{
    switch (d->ver) {
    case 8:
        return d->n8->closeListen(l);
    case 9:
        return d->n9->closeListen(l);
    case 10:
        return d->n10->closeListen(l);
    default:
        return d->n11->closeListen(l);
    }
}

static inline ncclResult_t drv_finalize(drv *d)
{
    return d->ver == 11 ? d->n11->finalize(d->ctx) : ncclSuccess;
}

#endif
