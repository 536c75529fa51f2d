#include "pair.h"

#include <stdlib.h>

int pair_init(struct pair *p, const homa_config *cfg)
{
    memset(p, 0, sizeof(*p));
    p->now = 1000000000ull;
    for (int i = 0; i < 2; i++) {
        p->addr[i].bytes[15] = (uint8_t)(i + 1);
        int err = homa_engine_create(cfg, NULL, &p->e[i]);
        if (err) return err;
    }
    return 0;
}

void pair_destroy(struct pair *p)
{
    for (int i = 0; i < 2; i++) homa_engine_destroy(p->e[i]);
}

int pair_step(struct pair *p, int from)
{
    homa_pkt_out out[16];
    static uint8_t buf[PAIR_MAX_PKT];
    int total = 0;
    for (;;) {
        int n = homa_engine_pull(p->e[from], p->now, out, 16);
        if (n == 0) break;
        for (int i = 0; i < n; i++) {
            size_t len = out[i].hdr_len + out[i].payload_len;
            memcpy(buf, out[i].hdr, out[i].hdr_len);
            if (out[i].payload_len) memcpy(buf + out[i].hdr_len, out[i].payload, out[i].payload_len);
            struct pair_pkt pk = {p->addr[from], p->addr[1 - from], out[i].priority, out[i].type,
                                  len, buf};
            if (p->filter && p->filter(p->filter_arg, from, &pk)) continue;
            uint8_t *dst;
            if (p->place && out[i].type == 0x10 /* DATA */ &&
                homa_engine_place_begin(p->e[1 - from], p->now, &p->addr[from], buf,
                                        out[i].hdr_len, len, &dst) == 0) {
                memcpy(dst, buf + out[i].hdr_len, len - out[i].hdr_len);
                homa_engine_place_end(p->e[1 - from], p->now, buf, out[i].hdr_len, len);
                p->placed++;
            } else {
                homa_engine_input(p->e[1 - from], p->now, &p->addr[from], buf, len);
            }
            total++;
            p->moved[from]++;
        }
        homa_engine_pull_done(p->e[from]);
    }
    return total;
}

int pair_settle(struct pair *p)
{
    int total = 0;
    for (int round = 0; round < 100000; round++) {
        int n = pair_step(p, 0) + pair_step(p, 1);
        total += n;
        if (n == 0) break;
    }
    return total;
}

void pair_advance(struct pair *p, uint64_t dt)
{
    p->now += dt;
    homa_engine_timer(p->e[0], p->now);
    homa_engine_timer(p->e[1], p->now);
    pair_settle(p);
}
