/* Configuration defaults and validation, counter and drop-reason names. */
#include <string.h>

#include "internal.h"

void homa_config_default(homa_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_message_length = 1000000;
    cfg->max_payload = 1400;
    cfg->unsched_bytes = 40000;
    cfg->grant_window = 0; /* 0 = same as unsched_bytes */
    cfg->max_incoming = 400000;
    cfg->max_overcommit = 8;
    cfg->grant_fifo_permille = 50;
    cfg->fifo_grant_increment = 50000;
    cfg->num_priorities = 8;
    /* Linux defaults: prio 7 <= 200 B, 6 <= 2,800, 5 <= 15,000, 4 <= 1,000,000,
     * 0 = everything else; 1-3 carry scheduled data only. */
    cfg->unsched_cutoffs[0] = 0x7fffffff;
    cfg->unsched_cutoffs[4] = 1000000;
    cfg->unsched_cutoffs[5] = 15000;
    cfg->unsched_cutoffs[6] = 2800;
    cfg->unsched_cutoffs[7] = 200;
    cfg->tick_ns = 1000000;
    cfg->resend_ticks = 5;
    cfg->resend_interval = 5;
    cfg->timeout_ticks = 100;
    cfg->need_ack_ticks = 2;
    cfg->link_bps = 0;
    cfg->max_nic_queue_ns = 5000;
    cfg->pacer_bypass_bytes = 1000;
    cfg->max_rx_bytes = 256ull << 20;
    cfg->max_rpcs = 100000;
    cfg->max_ports = 1024;
    cfg->tombstone_ticks = 0; /* 0 = 2 * timeout_ticks */
    cfg->max_tombstones = 65536;
    cfg->gap_resend_ticks = 1;
    cfg->adaptive_cutoffs = 1;
    cfg->cutoff_update_msgs = 1000;
    cfg->pkt_overhead = 0;
}

int homa_config_validate(const homa_config *c, const char **why)
{
    const char *w = NULL;
    if (c->max_message_length == 0 || c->max_message_length > 0x7fffffffu)
        w = "max_message_length must be 1..2^31-1";
    else if (c->max_payload < 1 || c->max_payload > 65535 - HOMA_DATA_HDR_LEN)
        w = "max_payload must be 1..65479";
    else if (c->max_incoming == 0)
        w = "max_incoming must be > 0";
    else if (c->max_overcommit < 1 || c->max_overcommit > 64)
        w = "max_overcommit must be 1..64";
    else if (c->grant_fifo_permille > 500)
        w = "grant_fifo_permille must be 0..500";
    else if (c->grant_fifo_permille > 0 && c->fifo_grant_increment == 0)
        w = "fifo_grant_increment must be > 0 when fifo grants are on";
    else if (c->num_priorities < 1 || c->num_priorities > HOMA_NUM_PRIORITIES)
        w = "num_priorities must be 1..8";
    else if (c->tick_ns < 1000)
        w = "tick_ns must be >= 1000";
    else if (c->resend_ticks < 1 || c->resend_interval < 1)
        w = "resend_ticks and resend_interval must be >= 1";
    else if (c->timeout_ticks <= c->resend_ticks)
        w = "timeout_ticks must exceed resend_ticks";
    else if (c->need_ack_ticks < 1)
        w = "need_ack_ticks must be >= 1";
    else if (c->max_rx_bytes < c->max_payload)
        w = "max_rx_bytes must hold at least one packet";
    else if (c->adaptive_cutoffs && c->cutoff_update_msgs < 100)
        w = "cutoff_update_msgs must be >= 100";
    else if (c->pkt_overhead > 1000)
        w = "pkt_overhead must be 0..1000";
    else if (c->max_rpcs < 1 || c->max_ports < 1 || c->max_tombstones < 1)
        w = "max_rpcs, max_ports and max_tombstones must be >= 1";
    else {
        for (uint32_t i = c->num_priorities; i < HOMA_NUM_PRIORITIES; i++)
            if (c->unsched_cutoffs[i] != 0) {
                w = "unsched_cutoffs above num_priorities must be 0";
                break;
            }
        if (!w && c->unsched_cutoffs[0] == 0 && c->num_priorities > 1) {
            /* entry 0 must catch every length that no higher level takes */
            w = "unsched_cutoffs[0] must be > 0 (it is 'everything')";
        }
    }
    if (why) *why = w ? w : "ok";
    return w ? HOMA_ERR_INVAL : 0;
}

static const char *const counter_names[] = {
#define HOMA_COUNTER_NAME(name, desc) #name,
    HOMA_COUNTER_LIST(HOMA_COUNTER_NAME)
#undef HOMA_COUNTER_NAME
};
static const char *const counter_descs[] = {
#define HOMA_COUNTER_DESC(name, desc) desc,
    HOMA_COUNTER_LIST(HOMA_COUNTER_DESC)
#undef HOMA_COUNTER_DESC
};
_Static_assert(sizeof(counter_names) / sizeof(counter_names[0]) * sizeof(uint64_t) ==
                   sizeof(homa_counters),
               "every counter has a name");

size_t homa_counter_count(void)
{
    return sizeof(counter_names) / sizeof(counter_names[0]);
}
const char *homa_counter_name(size_t i)
{
    return i < homa_counter_count() ? counter_names[i] : NULL;
}
const char *homa_counter_desc(size_t i)
{
    return i < homa_counter_count() ? counter_descs[i] : NULL;
}

const char *homa_drop_reason_name(int r)
{
    static const char *const names[HOMA_DROP__COUNT] = {
        [HOMA_DROP_NONE] = "none",
        [HOMA_DROP_SHORT] = "short",
        [HOMA_DROP_BAD_TYPE] = "bad_type",
        [HOMA_DROP_TRUNCATED] = "truncated",
        [HOMA_DROP_ZERO_ID] = "zero_id",
        [HOMA_DROP_BAD_RANGE] = "bad_range",
        [HOMA_DROP_BAD_PRIORITY] = "bad_priority",
        [HOMA_DROP_BAD_ACKS] = "bad_acks",
        [HOMA_DROP_MSG_TOO_LONG] = "msg_too_long",
        [HOMA_DROP_BAD_GRANT] = "bad_grant",
        [HOMA_DROP_INCONSISTENT] = "inconsistent",
        [HOMA_DROP_NO_PORT] = "no_port",
        [HOMA_DROP_NO_RPC] = "no_rpc",
        [HOMA_DROP_NO_MEMORY] = "no_memory",
        [HOMA_DROP_DUPLICATE] = "duplicate",
        [HOMA_DROP_COMPLETED] = "completed",
    };
    if (r < 0 || r >= HOMA_DROP__COUNT) return "unknown";
    return names[r];
}
