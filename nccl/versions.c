/* The exported NCCL plugin tables, ncclNetPlugin_v8 to _v11: thin wrappers
 * that adapt each version's signatures to the operations of homa_net.c. */
#include "homa_net.h"

#include <limits.h>
#include <stdlib.h>

#define HN_EXPORT __attribute__((visibility("default")))

/* ---- shared by several versions --------------------------------------- */

static ncclResult_t init_v8(ncclDebugLogger_t log)
{
    return hn_init(log);
}

static ncclResult_t connect_v8(int dev, void *handle, void **send_comm,
                               ncclNetDeviceHandle_v8_t **dev_comm)
{
    (void)dev_comm; /* no device offload: NCCL finds *dev_comm untouched */
    return hn_connect(dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, send_comm);
}

static ncclResult_t accept_v8(void *listen_comm, void **recv_comm,
                              ncclNetDeviceHandle_v8_t **dev_comm)
{
    (void)dev_comm;
    return hn_accept(listen_comm, recv_comm);
}

static ncclResult_t iflush_any(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                               void **request)
{
    (void)data;
    (void)sizes;
    (void)mhandles;
    return hn_iflush(recv_comm, n, request);
}

static ncclResult_t isend_size_t(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                                 void **request)
{
    (void)mhandle;
    return hn_isend(send_comm, data, size, tag, request);
}

static ncclResult_t irecv_size_t(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                 void **mhandles, void **request)
{
    (void)mhandles;
    return hn_irecv(recv_comm, n, data, sizes, tags, request);
}

/* ---- v8: int sizes ------------------------------------------------------ */

static ncclResult_t props_v8(int dev, ncclNetProperties_v8_t *p)
{
    hn_props h;
    if (!p) return ncclInvalidArgument;
    ncclResult_t rc = hn_get_props(dev, &h);
    if (rc != ncclSuccess) return rc;
    p->name = h.name;
    p->pciPath = h.pci_path;
    p->guid = h.guid;
    p->ptrSupport = NCCL_PTR_HOST;
    p->regIsGlobal = 0;
    p->speed = h.speed_mbps;
    p->port = 0;
    p->latency = h.latency_us;
    p->maxComms = h.max_comms;
    p->maxRecvs = h.max_recvs;
    p->netDeviceType = NCCL_NET_DEVICE_HOST;
    p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    return ncclSuccess;
}

static ncclResult_t isend_v8(void *send_comm, void *data, int size, int tag, void *mhandle,
                             void **request)
{
    (void)mhandle;
    if (size < 0) return ncclInvalidArgument;
    return hn_isend(send_comm, data, (size_t)size, tag, request);
}

static ncclResult_t irecv_v8(void *recv_comm, int n, void **data, int *sizes, int *tags,
                             void **mhandles, void **request)
{
    (void)mhandles;
    if (n != 1 || !sizes || sizes[0] < 0) {
        if (request) *request = NULL;
        return ncclInvalidArgument;
    }
    size_t s = (size_t)sizes[0];
    return hn_irecv(recv_comm, n, data, &s, tags, request);
}

HN_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "Homa",
    .init = init_v8,
    .devices = hn_devices,
    .getProperties = props_v8,
    .listen = hn_listen,
    .connect = connect_v8,
    .accept = accept_v8,
    .regMr = hn_reg_mr,
    .regMrDmaBuf = hn_reg_mr_dmabuf,
    .deregMr = hn_dereg_mr,
    .isend = isend_v8,
    .irecv = irecv_v8,
    .iflush = iflush_any,
    .test = hn_test,
    .closeSend = hn_close_send,
    .closeRecv = hn_close_recv,
    .closeListen = hn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};

/* ---- v9: size_t sizes, virtual devices ---------------------------------- */

static void fill_v9(int dev, const hn_props *h, ncclNetProperties_v9_t *p)
{
    p->name = h->name;
    p->pciPath = h->pci_path;
    p->guid = h->guid;
    p->ptrSupport = NCCL_PTR_HOST;
    p->regIsGlobal = 0;
    p->forceFlush = 0;
    p->speed = h->speed_mbps;
    p->port = 0;
    p->latency = h->latency_us;
    p->maxComms = h->max_comms;
    p->maxRecvs = h->max_recvs;
    p->netDeviceType = NCCL_NET_DEVICE_HOST;
    p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    p->maxP2pBytes = h->max_bytes;
    p->maxCollBytes = h->max_bytes;
}

static ncclResult_t props_v9(int dev, ncclNetProperties_v9_t *p)
{
    hn_props h;
    if (!p) return ncclInvalidArgument;
    ncclResult_t rc = hn_get_props(dev, &h);
    if (rc == ncclSuccess) fill_v9(dev, &h, p);
    return rc;
}

static ncclResult_t make_vdevice_v9(int *d, ncclNetVDeviceProps_v9_t *props)
{
    return hn_make_vdevice(d, props);
}

HN_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "Homa",
    .init = init_v8,
    .devices = hn_devices,
    .getProperties = props_v9,
    .listen = hn_listen,
    .connect = connect_v8,
    .accept = accept_v8,
    .regMr = hn_reg_mr,
    .regMrDmaBuf = hn_reg_mr_dmabuf,
    .deregMr = hn_dereg_mr,
    .isend = isend_size_t,
    .irecv = irecv_size_t,
    .iflush = iflush_any,
    .test = hn_test,
    .closeSend = hn_close_send,
    .closeRecv = hn_close_recv,
    .closeListen = hn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = make_vdevice_v9,
};

/* ---- v10: profiler handles, per-connection config ----------------------- */

static ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)prof;
    return hn_init(log);
}

static ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    /* The traffic class picks the comm's priority levels (NCCL_HOMA_TC_PRIO). */
    int tc = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    return hn_connect(dev, tc, handle, send_comm);
}

static ncclResult_t isend_v10(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void *phandle, void **request)
{
    (void)mhandle;
    (void)phandle;
    return hn_isend(send_comm, data, size, tag, request);
}

static ncclResult_t irecv_v10(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **phandles, void **request)
{
    (void)mhandles;
    (void)phandles;
    return hn_irecv(recv_comm, n, data, sizes, tags, request);
}

HN_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "Homa",
    .init = init_v10,
    .devices = hn_devices,
    .getProperties = props_v9,
    .listen = hn_listen,
    .connect = connect_v10,
    .accept = accept_v8,
    .regMr = hn_reg_mr,
    .regMrDmaBuf = hn_reg_mr_dmabuf,
    .deregMr = hn_dereg_mr,
    .isend = isend_v10,
    .irecv = irecv_v10,
    .iflush = iflush_any,
    .test = hn_test,
    .closeSend = hn_close_send,
    .closeRecv = hn_close_recv,
    .closeListen = hn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = make_vdevice_v9,
};

/* ---- v11: a context per NCCL communicator ------------------------------- */

/* All communicators share the process's one Homa socket; a context keeps
 * the communicator's traffic class for its connects. */
typedef struct hn_ctx {
    uint64_t comm_id;
    int tc;
} hn_ctx;

static ncclResult_t init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                             ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)prof;
    if (!ctx) return ncclInvalidArgument;
    *ctx = NULL;
    ncclResult_t rc = hn_init(log);
    if (rc != ncclSuccess) return rc;
    hn_ctx *c = malloc(sizeof(*c));
    if (!c) return ncclSystemError;
    c->comm_id = comm_id;
    c->tc = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    *ctx = c;
    return ncclSuccess;
}

static ncclResult_t finalize_v11(void *ctx)
{
    free(ctx);
    return ncclSuccess;
}

static ncclResult_t listen_v11(void *ctx, int dev, void *handle, void **listen_comm)
{
    (void)ctx;
    return hn_listen(dev, handle, listen_comm);
}

static ncclResult_t connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    hn_ctx *c = ctx;
    return hn_connect(dev, c ? c->tc : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, send_comm);
}

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t *p)
{
    hn_props h;
    if (!p) return ncclInvalidArgument;
    ncclResult_t rc = hn_get_props(dev, &h);
    if (rc != ncclSuccess) return rc;
    ncclNetProperties_v9_t q;
    fill_v9(dev, &h, &q);
    p->name = q.name;
    p->pciPath = q.pciPath;
    p->guid = q.guid;
    p->ptrSupport = q.ptrSupport;
    p->regIsGlobal = q.regIsGlobal;
    p->forceFlush = q.forceFlush;
    p->speed = q.speed;
    p->port = q.port;
    p->latency = q.latency;
    p->maxComms = q.maxComms;
    p->maxRecvs = q.maxRecvs;
    p->netDeviceType = q.netDeviceType;
    p->netDeviceVersion = q.netDeviceVersion;
    p->vProps = q.vProps;
    p->maxP2pBytes = q.maxP2pBytes;
    p->maxCollBytes = q.maxCollBytes;
    p->maxMultiRequestSize = 1;
    return ncclSuccess;
}

static ncclResult_t set_net_attr_v11(void *ctx, ncclNetAttr_v11_t *attr)
{
    (void)ctx;
    (void)attr; /* hints only; Homa's scheduling needs none */
    return ncclSuccess;
}

HN_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "Homa",
    .init = init_v11,
    .devices = hn_devices,
    .getProperties = props_v11,
    .listen = listen_v11,
    .connect = connect_v11,
    .accept = accept_v8,
    .regMr = hn_reg_mr,
    .regMrDmaBuf = hn_reg_mr_dmabuf,
    .deregMr = hn_dereg_mr,
    .isend = isend_v10,
    .irecv = irecv_v10,
    .iflush = iflush_any,
    .test = hn_test,
    .closeSend = hn_close_send,
    .closeRecv = hn_close_recv,
    .closeListen = hn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = make_vdevice_v9,
    .finalize = finalize_v11,
    .setNetAttr = set_net_attr_v11,
};
