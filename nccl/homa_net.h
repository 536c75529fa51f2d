/* libnccl-net-homa internals: the version-independent plugin operations
 * (homa_net.c) that the per-version tables (versions.c) wrap.  Sizes are
 * size_t here; the v8 wrappers convert from int. */
#ifndef HOMA_NCCL_HOMA_NET_H
#define HOMA_NCCL_HOMA_NET_H

#include "nccl_net_abi.h"

/* The properties every version reports, in one place. */
typedef struct hn_props {
    char *name;
    char *pci_path;
    uint64_t guid;
    int speed_mbps;
    float latency_us;
    int max_comms;
    int max_recvs;
    size_t max_bytes;
} hn_props;

ncclResult_t hn_init(ncclDebugLogger_t log);
ncclResult_t hn_devices(int *ndev);
ncclResult_t hn_get_props(int dev, hn_props *out);
ncclResult_t hn_listen(int dev, void *handle, void **listen_comm);
/* tc: the comm's NCCL traffic class, -1 for none (NCCL_HOMA_TC_PRIO). */
ncclResult_t hn_connect(int dev, int tc, void *handle, void **send_comm);
ncclResult_t hn_accept(void *listen_comm, void **recv_comm);
ncclResult_t hn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t hn_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
ncclResult_t hn_dereg_mr(void *comm, void *mhandle);
ncclResult_t hn_isend(void *send_comm, void *data, size_t size, int tag, void **request);
ncclResult_t hn_irecv(void *recv_comm, int n, void **data, const size_t *sizes, const int *tags,
                      void **request);
ncclResult_t hn_iflush(void *recv_comm, int n, void **request);
ncclResult_t hn_test(void *request, int *done, int *sizes);
ncclResult_t hn_close_send(void *send_comm);
ncclResult_t hn_close_recv(void *recv_comm);
ncclResult_t hn_close_listen(void *listen_comm);
ncclResult_t hn_make_vdevice(int *d, const ncclNetVDeviceProps_v9_t *props);

#endif
