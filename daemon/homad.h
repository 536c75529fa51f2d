/* homad's settings: flags, the config file and the port policy
 * (daemon/options.c, homad(8)). */
#ifndef HOMAD_H
#define HOMAD_H

#include <stdint.h>
#include <sys/types.h>

#include <homa/homa.h>

#define HOMAD_MAX_RULES 64

/* `bind UID|* LOW-HIGH`: that user (or anyone) may bind those ports. */
struct homad_rule {
    int any_uid;
    uid_t uid;
    uint16_t lo, hi;
};

struct homad_opts {
    char socket_path[108];
    char config_path[256];
    unsigned socket_mode;
    uint32_t cmd_ring, cq_ring, tx_slots, rx_slots;
    uint64_t slot_size; /* 0 = the engine's max_message_length */
    uint32_t max_rpcs, max_ports, max_procs;
    uint32_t max_class; /* highest scheduling class for non-root processes */
    uint32_t busy_poll_us;
    uint32_t verbose;
    int stats, json; /* --stats [--json]: print a running homad's counters */
    /* Engine settings (0 = the runtime's default). */
    uint32_t mtu, max_payload, max_message_length, unsched_bytes, grant_window, max_incoming,
        max_overcommit, timeout_ticks, tick_us;
    uint32_t no_gso; /* 1: never send UDP GSO batches */
    uint64_t link_bps, max_rx_bytes;
    struct homad_rule rules[HOMAD_MAX_RULES];
    int nrules; /* 0: the default policy */
};

/* Parses flags and the config file they name (flags win).  Returns 0, 1
 * if --help/--version was printed, or -1 after printing an error. */
int homad_parse_args(struct homad_opts *o, int argc, char **argv);
/* homad --stats: returns the exit status. */
int homad_stats(const struct homad_opts *o);
/* Applies the engine settings to runtime options. */
void homad_engine_options(const struct homad_opts *o, homa_runtime_options *ro);
/* 1 if `uid` may bind `port` (1..65535). */
int homad_policy_allows(const struct homad_opts *o, uid_t uid, uint16_t port);
/* 1 if `uid` may give its sockets scheduling class `sched_class`. */
int homad_class_allows(const struct homad_opts *o, uid_t uid, uint32_t sched_class);

#endif
