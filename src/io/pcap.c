/* Packet capture in pcap format (LINKTYPE_RAW: each record starts with an
 * IPv4 or IPv6 header), so tcpdump/wireshark can read what libhoma sent and
 * received.  The kernel never shows us the IP and UDP headers of our UDP
 * datagrams, so they are synthesized here with the real addresses, ports and
 * TOS; lengths and checksums are computed so tools don't flag the records. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "io/io.h"

#define PCAP_MAGIC_NS 0xa1b23c4du /* nanosecond-resolution timestamps */
#define PCAP_LINKTYPE_RAW 101u
#define PCAP_SNAPLEN 262144u
#define SRC_CACHE 32

struct src_entry {
    homa_addr dst;
    homa_addr src;
    int valid;
};

struct homa_pcap {
    pthread_mutex_t lock;
    FILE *f;
    uint64_t last_flush_ns;
    struct src_entry cache[SRC_CACHE];
    unsigned next_victim;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int homa_pcap_open(const char *path, homa_pcap **out)
{
    homa_pcap *p = calloc(1, sizeof(*p));
    if (p == NULL) return HOMA_ERR_NOMEM;
    p->f = fopen(path, "wb");
    if (p->f == NULL) {
        free(p);
        return HOMA_ERR_IO;
    }
    pthread_mutex_init(&p->lock, NULL);
    /* Global header in host byte order: readers detect the byte order from
     * the magic number. */
    struct {
        uint32_t magic;
        uint16_t major, minor;
        int32_t thiszone;
        uint32_t sigfigs, snaplen, linktype;
    } gh = {PCAP_MAGIC_NS, 2, 4, 0, 0, PCAP_SNAPLEN, PCAP_LINKTYPE_RAW};
    if (fwrite(&gh, sizeof(gh), 1, p->f) != 1) {
        fclose(p->f);
        free(p);
        return HOMA_ERR_IO;
    }
    p->last_flush_ns = mono_ns();
    *out = p;
    return 0;
}

void homa_pcap_flush(homa_pcap *p)
{
    pthread_mutex_lock(&p->lock);
    fflush(p->f);
    pthread_mutex_unlock(&p->lock);
}

void homa_pcap_close(homa_pcap *p)
{
    if (p == NULL) return;
    fclose(p->f);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static int is_v4(const homa_addr *a)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a->bytes, prefix, 12) == 0;
}

/* One's-complement sum over 16-bit big-endian words (odd tail padded). */
static uint32_t csum_add(uint32_t sum, const uint8_t *d, size_t len, int *odd)
{
    for (size_t i = 0; i < len; i++) {
        if (*odd)
            sum += d[i];
        else
            sum += (uint32_t)d[i] << 8;
        *odd ^= 1;
    }
    return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* Writes the IPv4 (20 bytes) or IPv6 (40 bytes) header of a synthesized
 * packet carrying plen bytes of protocol proto into hdr; df sets IPv4's
 * don't-fragment bit.  Returns the header's length. */
static size_t put_ip_header(uint8_t *hdr, const homa_addr *src, const homa_addr *dst, uint8_t tos,
                            uint8_t proto, int df, size_t plen)
{
    if (is_v4(dst)) {
        int odd = 0;
        memset(hdr, 0, 20);
        hdr[0] = 0x45;
        hdr[1] = tos;
        size_t total = 20 + plen;
        put16(hdr + 2, total > 0xffff ? 0xffff : (uint16_t)total);
        if (df) hdr[6] = 0x40;
        hdr[8] = 64;
        hdr[9] = proto;
        memcpy(hdr + 12, src->bytes + 12, 4);
        memcpy(hdr + 16, dst->bytes + 12, 4);
        put16(hdr + 10, csum_fold(csum_add(0, hdr, 20, &odd)));
        return 20;
    }
    memset(hdr, 0, 40);
    hdr[0] = (uint8_t)(0x60 | (tos >> 4));
    hdr[1] = (uint8_t)(tos << 4);
    put16(hdr + 4, plen > 0xffff ? 0xffff : (uint16_t)plen);
    hdr[6] = proto;
    hdr[7] = 64;
    memcpy(hdr + 8, src->bytes, 16);
    memcpy(hdr + 24, dst->bytes, 16);
    return 40;
}

/* Appends one record: hdr (hlen bytes) followed by a and b. */
static void put_record(homa_pcap *p, const uint8_t *hdr, size_t hlen, const uint8_t *a, size_t alen,
                       const uint8_t *b, size_t blen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t caplen = (uint32_t)(hlen + alen + blen);
    uint32_t rec[4] = {(uint32_t)ts.tv_sec, (uint32_t)ts.tv_nsec, caplen, caplen};

    pthread_mutex_lock(&p->lock);
    fwrite(rec, sizeof(rec), 1, p->f);
    fwrite(hdr, hlen, 1, p->f);
    if (alen > 0) fwrite(a, alen, 1, p->f);
    if (blen > 0) fwrite(b, blen, 1, p->f);
    /* Buffered for speed, but flushed every 100 ms so a capture of a run
     * that crashes or is killed still holds nearly everything. */
    uint64_t now = mono_ns();
    if (now - p->last_flush_ns > 100000000ull) {
        fflush(p->f);
        p->last_flush_ns = now;
    }
    pthread_mutex_unlock(&p->lock);
}

void homa_pcap_write(homa_pcap *p, const homa_addr *src, uint16_t sport, const homa_addr *dst,
                     uint16_t dport, uint8_t tos, const uint8_t *a, size_t alen, const uint8_t *b,
                     size_t blen)
{
    uint8_t hdr[48];
    size_t udplen = 8 + alen + blen;
    uint32_t sum = 0;
    int odd = 0;
    uint8_t pseudo[40];

    /* DF on IPv4, as Linux sets for UDP with PMTU discovery. */
    size_t iplen = put_ip_header(hdr, src, dst, tos, IPPROTO_UDP, 1, udplen);
    if (iplen == 20) {
        memcpy(pseudo, src->bytes + 12, 4);
        memcpy(pseudo + 4, dst->bytes + 12, 4);
        pseudo[8] = 0;
        pseudo[9] = IPPROTO_UDP;
        put16(pseudo + 10, (uint16_t)udplen);
        sum = csum_add(sum, pseudo, 12, &odd);
    } else {
        memcpy(pseudo, src->bytes, 16);
        memcpy(pseudo + 16, dst->bytes, 16);
        memset(pseudo + 32, 0, 8);
        pseudo[34] = (uint8_t)(udplen >> 8);
        pseudo[35] = (uint8_t)udplen;
        pseudo[39] = IPPROTO_UDP;
        sum = csum_add(sum, pseudo, 40, &odd);
    }
    uint8_t *udp = hdr + iplen;
    put16(udp, sport);
    put16(udp + 2, dport);
    put16(udp + 4, (uint16_t)udplen);
    udp[6] = udp[7] = 0;
    sum = csum_add(sum, udp, 8, &odd);
    sum = csum_add(sum, a, alen, &odd);
    if (blen > 0) sum = csum_add(sum, b, blen, &odd);
    uint16_t c = csum_fold(sum);
    put16(udp + 6, c == 0 ? 0xffff : c); /* 0 means "no checksum" in UDP */

    put_record(p, hdr, iplen + 8, a, alen, b, blen);
}

void homa_pcap_source_for(homa_pcap *p, const homa_addr *dst, homa_addr *src)
{
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < SRC_CACHE; i++) {
        if (p->cache[i].valid && memcmp(&p->cache[i].dst, dst, sizeof(*dst)) == 0) {
            *src = p->cache[i].src;
            pthread_mutex_unlock(&p->lock);
            return;
        }
    }
    pthread_mutex_unlock(&p->lock);

    /* Connecting a UDP socket performs the route lookup without sending
     * anything; getsockname then tells the source address the kernel picks. */
    homa_addr found;
    memset(&found, 0, sizeof(found));
    if (is_v4(dst)) memcpy(found.bytes + 10, "\xff\xff", 2);
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct sockaddr_in6 sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin6_family = AF_INET6;
        sa.sin6_port = htons(9);
        memcpy(&sa.sin6_addr, dst->bytes, 16);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            struct sockaddr_in6 me;
            socklen_t len = sizeof(me);
            if (getsockname(fd, (struct sockaddr *)&me, &len) == 0 && me.sin6_family == AF_INET6)
                memcpy(found.bytes, &me.sin6_addr, 16);
        }
        close(fd);
    }
    *src = found;

    pthread_mutex_lock(&p->lock);
    struct src_entry *e = &p->cache[p->next_victim++ % SRC_CACHE];
    e->dst = *dst;
    e->src = found;
    e->valid = 1;
    pthread_mutex_unlock(&p->lock);
}

void homa_pcap_write_ip(homa_pcap *p, const homa_addr *src, const homa_addr *dst, uint8_t tos,
                        const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    uint8_t hdr[40];
    size_t iplen = put_ip_header(hdr, src, dst, tos, HOMA_IPPROTO, 0, alen + blen);
    put_record(p, hdr, iplen, a, alen, b, blen);
}
