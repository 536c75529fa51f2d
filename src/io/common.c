/* Helpers shared by the UDP and raw drivers (common.h). */
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/wire.h"
#include "io/common.h"

int homa_io_addr_is_v4(const homa_addr *a)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a->bytes, prefix, 12) == 0;
}

int homa_io_addr_is_zero(const homa_addr *a)
{
    static const homa_addr zero;
    return memcmp(a, &zero, sizeof(zero)) == 0;
}

void homa_io_addr_from_v4(homa_addr *a, const void *ip4)
{
    memset(a->bytes, 0, 10);
    a->bytes[10] = a->bytes[11] = 0xff;
    memcpy(a->bytes + 12, ip4, 4);
}

static void set_buf(int fd, int force_opt, int opt, uint32_t size)
{
    int v = (int)size;
    if (setsockopt(fd, SOL_SOCKET, force_opt, &v, sizeof(v)) != 0)
        setsockopt(fd, SOL_SOCKET, opt, &v, sizeof(v));
}

void homa_io_set_bufs(int fd, const homa_io_opts *opts)
{
    set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF,
            opts && opts->rcvbuf ? opts->rcvbuf : HOMA_IO_RCVBUF_DEFAULT);
    set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF,
            opts && opts->sndbuf ? opts->sndbuf : HOMA_IO_SNDBUF_DEFAULT);
}

int homa_io_is_garbage(const uint8_t *d, size_t len)
{
    if (len < HOMA_COMMON_HDR_LEN) return 1;
    size_t need = homa_wire_hdr_len(d[11]); /* 0: not a Homa type */
    return need == 0 || len < need;
}

int homa_io_fault_decide_out(homa_fault_state *st, uint64_t now, const homa_pkt_out *p,
                             uint64_t *hold_ns, uint32_t *wait)
{
    if (!st->active) return HOMA_FAULT_PASS;
    uint8_t hb[HOMA_DATA_HDR_LEN];
    const uint8_t *hp = p->hdr;
    size_t total = (size_t)p->hdr_len + p->payload_len;
    if (p->hdr_len < sizeof(hb) && p->payload_len > 0) {
        size_t more = sizeof(hb) - p->hdr_len;
        if (more > p->payload_len) more = p->payload_len;
        memcpy(hb, p->hdr, p->hdr_len);
        memcpy(hb + p->hdr_len, p->payload, more);
        hp = hb;
        total = p->hdr_len + more;
    }
    return homa_fault_decide(st, now, hp, total, hold_ns, wait);
}

int homa_io_fault_send(homa_fault_state *st, homa_faultq *q, homa_driver_counters *c, uint64_t now,
                       const homa_pkt_out *p, uint8_t tos)
{
    uint64_t hold = 0;
    uint32_t wait = 1;
    int act = homa_io_fault_decide_out(st, now, p, &hold, &wait);
    if (act == HOMA_FAULT_DROP) {
        HOMA_IO_CTR_ADD(c, fault_drops, 1);
        if (p->type == HOMA_PKT_DATA) HOMA_IO_CTR_ADD(c, fault_drop_bytes, p->payload_len);
        return 0;
    }
    /* A reordered packet that not enough later packets overtake still
     * leaves after delay_us.  When the queue is full, it goes now. */
    if ((act == HOMA_FAULT_DELAY || act == HOMA_FAULT_REORDER) &&
        homa_faultq_hold(q, now + hold, act == HOMA_FAULT_REORDER ? wait : 0, &p->dst, p->dport,
                         tos, p->hdr, p->hdr_len, p->payload, p->payload_len) == 0) {
        HOMA_IO_CTR_ADD(c, fault_delays, act == HOMA_FAULT_DELAY);
        HOMA_IO_CTR_ADD(c, fault_reorders, act == HOMA_FAULT_REORDER);
        return 0;
    }
    if (act == HOMA_FAULT_DUP) {
        HOMA_IO_CTR_ADD(c, fault_dups, 1);
        return 2;
    }
    return 1;
}

uint64_t homa_io_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void homa_io_counters_add(const homa_driver_counters *c, homa_driver_counters *sum)
{
#define HOMA_ADD_CTR(name, desc) sum->name += __atomic_load_n(&c->name, __ATOMIC_RELAXED);
    HOMA_DRIVER_COUNTER_LIST(HOMA_ADD_CTR)
#undef HOMA_ADD_CTR
}
