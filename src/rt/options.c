/* Runtime options: their defaults, the HOMA_* environment variables that
 * override them, and the DATA payload that fits a path MTU; and the names
 * of the driver counters. */
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <homa/homa.h>

#include "rt/rt.h"

void homa_runtime_options_default(homa_runtime_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    homa_config_default(&opts->config);
    opts->busy_poll_us = 50;
    opts->faults.delay_us = 1000;
}

int homa_rt_env_options(homa_runtime_options *o)
{
    const char *v = getenv("HOMA_FAULTS");
    if (v != NULL && v[0] != '\0') {
        char err[160];
        if (homa_faults_parse(v, &o->faults, err, sizeof(err)) != 0) {
            fprintf(stderr, "libhoma: HOMA_FAULTS=\"%s\": %s\n", v, err);
            return HOMA_ERR_INVAL;
        }
    }
    v = getenv("HOMA_PCAP");
    if (v != NULL && v[0] != '\0') o->pcap_path = v;
    v = getenv("HOMA_BUSY_POLL_US");
    if (v != NULL && v[0] != '\0') {
        char *end;
        unsigned long us = strtoul(v, &end, 10);
        if (*end != '\0' || us > 1000000) {
            fprintf(stderr, "libhoma: HOMA_BUSY_POLL_US=\"%s\": expected 0..1000000\n", v);
            return HOMA_ERR_INVAL;
        }
        o->busy_poll_us = (uint32_t)us;
    }
    v = getenv("HOMA_DRIVER");
    if (v != NULL && v[0] != '\0') {
        if (strcmp(v, "raw") == 0) {
            o->flags |= HOMA_RT_RAW;
        } else if (strcmp(v, "udp") == 0) {
            o->flags &= ~HOMA_RT_RAW;
        } else {
            fprintf(stderr, "libhoma: HOMA_DRIVER=\"%s\": expected udp or raw\n", v);
            return HOMA_ERR_INVAL;
        }
    }
    v = getenv("HOMA_MTU");
    if (v != NULL && v[0] != '\0' && o->mtu == 0) {
        char *end;
        unsigned long m = strtoul(v, &end, 10);
        if (*end != '\0' || m < 576 || m > 65536) {
            fprintf(stderr, "libhoma: HOMA_MTU=\"%s\": expected a number in 576..65536\n", v);
            return HOMA_ERR_INVAL;
        }
        o->mtu = (uint32_t)m;
    }
    return 0;
}

/* Largest MTU among the interfaces that are up. */
uint32_t homa_rt_host_mtu(void)
{
    uint32_t best = 0;
    struct if_nameindex *ifs = if_nameindex();
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (ifs != NULL && fd >= 0) {
        for (struct if_nameindex *i = ifs; i->if_index != 0; i++) {
            struct ifreq ifr;
            memset(&ifr, 0, sizeof(ifr));
            snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", i->if_name);
            if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 || !(ifr.ifr_flags & IFF_UP)) continue;
            if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0 && (uint32_t)ifr.ifr_mtu > best)
                best = (uint32_t)ifr.ifr_mtu;
        }
    }
    if (fd >= 0) close(fd);
    if (ifs != NULL) if_freenameindex(ifs);
    return best ? best : 1500;
}

/* Payload per DATA packet for a path MTU: IPv6 (40) + UDP (8) + Homa DATA
 * header (56) per packet, and never more than the largest UDP datagram
 * IPv4 can carry (65,507 bytes). */
uint32_t homa_rt_payload_for_mtu(uint32_t mtu)
{
    uint32_t p = mtu > 104 + 64 ? mtu - 104 : 64;
    if (p > 65507 - 56) p = 65507 - 56;
    return p;
}

/* The same over raw IP: no UDP header (IPv6's 40 bytes still assumed, so
 * one size fits both families), and at most an IPv4 packet's 65,535 bytes
 * with its 20-byte header.  At MTU 1500 that is 1,404 bytes (the kernel
 * module, which sizes per family, sends 1,424 over IPv4). */
uint32_t homa_rt_raw_payload_for_mtu(uint32_t mtu)
{
    uint32_t p = mtu > 96 + 64 ? mtu - 96 : 64;
    if (p > 65535 - 20 - 56) p = 65535 - 20 - 56;
    return p;
}

#define HOMA_DRV_NAME(name, desc) #name,
#define HOMA_DRV_DESC(name, desc) desc,
static const char *const drv_names[] = {HOMA_DRIVER_COUNTER_LIST(HOMA_DRV_NAME)};
static const char *const drv_descs[] = {HOMA_DRIVER_COUNTER_LIST(HOMA_DRV_DESC)};
#undef HOMA_DRV_NAME
#undef HOMA_DRV_DESC

size_t homa_driver_counter_count(void)
{
    return sizeof(drv_names) / sizeof(drv_names[0]);
}

const char *homa_driver_counter_name(size_t i)
{
    return i < homa_driver_counter_count() ? drv_names[i] : NULL;
}

const char *homa_driver_counter_desc(size_t i)
{
    return i < homa_driver_counter_count() ? drv_descs[i] : NULL;
}
