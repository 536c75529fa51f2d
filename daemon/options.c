/* homad's flags, config file and port policy (homad(8)).  Every setting has
 * one name: `--max-rpcs N` on the command line is `max_rpcs N` in the config
 * file.  The config file is read first; flags override it. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "homad.h"
#include "rt/homad_proto.h"

enum kind { K_U32, K_U64, K_STR, K_MODE };

struct key {
    const char *name;
    enum kind kind;
    size_t off;
    size_t size; /* K_STR: buffer size */
    const char *help;
};

#define F(field) offsetof(struct homad_opts, field)
static const struct key keys[] = {
    {"socket", K_STR, F(socket_path), sizeof(((struct homad_opts *)0)->socket_path),
     "unix socket to serve (default /run/homad.sock)"},
    {"socket_mode", K_MODE, F(socket_mode), 0, "octal mode of the socket file (default 0666)"},
    {"cmd_ring", K_U32, F(cmd_ring), 0, "command ring entries per process (power of 2; 256)"},
    {"cq_ring", K_U32, F(cq_ring), 0, "completion ring entries per process (power of 2; 1024)"},
    {"tx_slots", K_U32, F(tx_slots), 0, "outgoing message slots per process (16)"},
    {"rx_slots", K_U32, F(rx_slots), 0, "incoming message slots per process (64)"},
    {"slot_size", K_U64, F(slot_size), 0, "bytes per slot (default max_message_length)"},
    {"max_rpcs", K_U32, F(max_rpcs), 0, "client RPCs in flight per process (1024)"},
    {"max_ports", K_U32, F(max_ports), 0, "open ports per process (64)"},
    {"max_procs", K_U32, F(max_procs), 0, "connected processes (64)"},
    {"max_class", K_U32, F(max_class), 0,
     "highest scheduling class a non-root process may set (0-3; 1)"},
    {"busy_poll_us", K_U32, F(busy_poll_us), 0, "spin this long before sleeping (50)"},
    {"verbose", K_U32, F(verbose), 0, "1: log connections and reclaims"},
    {"mtu", K_U32, F(mtu), 0, "engine: path MTU (default: the interfaces')"},
    {"max_payload", K_U32, F(max_payload), 0,
     "engine: payload bytes per DATA packet (default: from the MTU)"},
    {"no_gso", K_U32, F(no_gso), 0, "1: never send UDP GSO batches (0)"},
    {"link_bps", K_U64, F(link_bps), 0, "engine: pacer link rate in bit/s (0 = no pacing)"},
    {"max_message_length", K_U32, F(max_message_length), 0, "engine: longest message (1000000)"},
    {"unsched_bytes", K_U32, F(unsched_bytes), 0, "engine: unscheduled bytes per message"},
    {"max_rx_bytes", K_U64, F(max_rx_bytes), 0, "engine: memory cap for incoming messages"},
    {"grant_window", K_U32, F(grant_window), 0, "engine: granted-ahead bytes per message"},
    {"max_incoming", K_U32, F(max_incoming), 0, "engine: cap on granted-but-unreceived bytes"},
    {"max_overcommit", K_U32, F(max_overcommit), 0, "engine: messages granted at once (8)"},
    {"timeout_ticks", K_U32, F(timeout_ticks), 0, "engine: silent ticks before an RPC fails"},
    {"tick_us", K_U32, F(tick_us), 0, "engine: timer tick in microseconds (1000)"},
};
#undef F
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static void defaults(struct homad_opts *o)
{
    memset(o, 0, sizeof(*o));
    strcpy(o->socket_path, "/run/homad.sock");
    o->socket_mode = 0666;
    o->cmd_ring = 256;
    o->cq_ring = 1024;
    o->tx_slots = 16;
    o->rx_slots = 64;
    o->max_rpcs = 1024;
    o->max_ports = 64;
    o->max_procs = 64;
    o->busy_poll_us = 50;
    o->max_class = 1;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0])) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max) return -1;
    *out = v;
    return 0;
}

static int set_key(struct homad_opts *o, const char *name, const char *val, const char *where)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const struct key *k = &keys[i];
        if (strcmp(k->name, name) != 0) continue;
        char *p = (char *)o + k->off;
        uint64_t v;
        switch (k->kind) {
        case K_STR:
            if (val == NULL || strlen(val) >= k->size || val[0] == '\0') break;
            strcpy(p, val);
            return 0;
        case K_U32:
            if (parse_u64(val, UINT32_MAX, &v) != 0) break;
            *(uint32_t *)(void *)p = (uint32_t)v;
            return 0;
        case K_U64:
            if (parse_u64(val, UINT64_MAX, &v) != 0) break;
            *(uint64_t *)(void *)p = v;
            return 0;
        case K_MODE: {
            char *end;
            unsigned long m = val ? strtoul(val, &end, 8) : 0;
            if (val == NULL || *end != '\0' || m > 0777) break;
            *(unsigned *)(void *)p = (unsigned)m;
            return 0;
        }
        }
        fprintf(stderr, "homad: %s: bad value for %s: %s\n", where, name, val ? val : "(none)");
        return -1;
    }
    fprintf(stderr, "homad: %s: unknown setting %s (see homad --help)\n", where, name);
    return -1;
}

/* `bind UID|* LOW-HIGH` or `bind UID|* PORT`. */
static int add_rule(struct homad_opts *o, const char *who, const char *range, const char *where)
{
    struct homad_rule r = {0};
    uint64_t v, lo, hi;
    if (who == NULL || range == NULL) goto bad;
    if (strcmp(who, "*") == 0) {
        r.any_uid = 1;
    } else {
        if (parse_u64(who, UINT32_MAX - 1, &v) != 0) goto bad;
        r.uid = (uid_t)v;
    }
    char buf[32];
    if (strlen(range) >= sizeof(buf)) goto bad;
    strcpy(buf, range);
    char *dash = strchr(buf, '-');
    if (dash != NULL) *dash = '\0';
    if (parse_u64(buf, 65535, &lo) != 0) goto bad;
    hi = lo;
    if (dash != NULL && parse_u64(dash + 1, 65535, &hi) != 0) goto bad;
    if (lo == 0 || hi < lo) goto bad;
    if (o->nrules >= HOMAD_MAX_RULES) {
        fprintf(stderr, "homad: %s: more than %d bind rules\n", where, HOMAD_MAX_RULES);
        return -1;
    }
    r.lo = (uint16_t)lo;
    r.hi = (uint16_t)hi;
    o->rules[o->nrules++] = r;
    return 0;
bad:
    fprintf(stderr, "homad: %s: bad bind rule (want: bind UID|* LOW-HIGH)\n", where);
    return -1;
}

static int load_config(struct homad_opts *o, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "homad: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[512];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char where[300];
        snprintf(where, sizeof(where), "%s:%d", path, lineno);
        if (strchr(line, '\n') == NULL && !feof(f)) {
            fprintf(stderr, "homad: %s: line too long\n", where);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        char *tok[4] = {0};
        int nt = 0;
        for (char *save = NULL, *t = strtok_r(line, " \t\r\n=", &save); t != NULL;
             t = strtok_r(NULL, " \t\r\n=", &save)) {
            if (nt == 4) {
                nt++;
                break;
            }
            tok[nt++] = t;
        }
        if (nt == 0) continue;
        if (strcmp(tok[0], "bind") == 0 && nt == 3)
            rc = add_rule(o, tok[1], tok[2], where);
        else if (nt == 2)
            rc = set_key(o, tok[0], tok[1], where);
        else {
            fprintf(stderr, "homad: %s: want `key value` or `bind UID|* LOW-HIGH`\n", where);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: homad [options]\n"
                 "Serves the host's single Homa engine to its processes over a unix socket\n"
                 "(clients: HOMA_DAEMON=PATH or homa_runtime_connect()).\n\n"
                 "  --config FILE             read settings (`key value`, `bind UID|* LOW-HIGH`)\n"
                 "  --stats [--json]          print the counters of the homad serving --socket\n"
                 "  --help                    this text\n"
                 "  --version                 print the version\n");
    for (size_t i = 0; i < NKEYS; i++) {
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s", keys[i].name);
        for (char *p = flag; *p; p++)
            if (*p == '_') *p = '-';
        strcat(flag, keys[i].kind == K_STR ? " PATH" : keys[i].kind == K_MODE ? " MODE" : " N");
        fprintf(out, "  %-25s %s\n", flag, keys[i].help);
    }
    fprintf(out, "\nWithout bind rules: uid 0 may bind any port, other users 1024-65535;\n"
                 "port 0 (an ephemeral port) is always allowed.\n");
}

/* "--max-rpcs" -> "max_rpcs". */
static int flag_key(const char *arg, char *key, size_t len)
{
    if (strncmp(arg, "--", 2) != 0 || strlen(arg + 2) >= len) return -1;
    strcpy(key, arg + 2);
    for (char *p = key; *p; p++)
        if (*p == '-') *p = '_';
    return 0;
}

int homad_parse_args(struct homad_opts *o, int argc, char **argv)
{
    defaults(o);
    /* First pass: --help, --version, --config. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("homad (libhoma) %s\n", HOMA_VERSION_STRING);
            return 1;
        }
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc || strlen(argv[i + 1]) >= sizeof(o->config_path)) {
                fprintf(stderr, "homad: --config needs a file\n");
                return -1;
            }
            strcpy(o->config_path, argv[++i]);
        }
    }
    if (o->config_path[0] != '\0' && load_config(o, o->config_path) != 0) return -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            i++;
            continue;
        }
        if (strcmp(argv[i], "--stats") == 0 || strcmp(argv[i], "--json") == 0) {
            *(argv[i][2] == 's' ? &o->stats : &o->json) = 1;
            continue;
        }
        char key[64];
        if (flag_key(argv[i], key, sizeof(key)) != 0) {
            fprintf(stderr, "homad: unexpected argument %s (see homad --help)\n", argv[i]);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "homad: %s needs a value\n", argv[i]);
            return -1;
        }
        if (set_key(o, key, argv[i + 1], "command line") != 0) return -1;
        i++;
    }
    if (o->max_procs == 0 || o->max_ports == 0) {
        fprintf(stderr, "homad: max_procs and max_ports must be at least 1\n");
        return -1;
    }
    if (o->max_class >= HOMA_SCHED_CLASSES) {
        fprintf(stderr, "homad: max_class must be 0 to %d\n", HOMA_SCHED_CLASSES - 1);
        return -1;
    }
    return 0;
}

void homad_engine_options(const struct homad_opts *o, homa_runtime_options *ro)
{
    if (o->mtu) ro->mtu = o->mtu;
    if (o->max_payload) ro->max_payload = o->max_payload;
    if (o->no_gso) ro->flags |= HOMA_RT_NO_GSO;
    if (o->max_overcommit) ro->config.max_overcommit = o->max_overcommit;
    if (o->link_bps) ro->link_bps = o->link_bps;
    if (o->max_message_length) ro->config.max_message_length = o->max_message_length;
    if (o->unsched_bytes) ro->config.unsched_bytes = o->unsched_bytes;
    if (o->max_rx_bytes) ro->config.max_rx_bytes = o->max_rx_bytes;
    if (o->grant_window) ro->config.grant_window = o->grant_window;
    if (o->max_incoming) ro->config.max_incoming = o->max_incoming;
    if (o->timeout_ticks) ro->config.timeout_ticks = o->timeout_ticks;
    if (o->tick_us) ro->config.tick_ns = (uint64_t)o->tick_us * 1000u;
    ro->busy_poll_us = o->busy_poll_us;
}

int homad_class_allows(const struct homad_opts *o, uid_t uid, uint32_t sched_class)
{
    return uid == 0 || sched_class <= o->max_class;
}

int homad_policy_allows(const struct homad_opts *o, uid_t uid, uint16_t port)
{
    if (o->nrules == 0) return uid == 0 || port >= 1024;
    for (int i = 0; i < o->nrules; i++) {
        const struct homad_rule *r = &o->rules[i];
        if ((r->any_uid || r->uid == uid) && port >= r->lo && port <= r->hi) return 1;
    }
    return 0;
}
