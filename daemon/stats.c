/* homad --stats: the daemon's counters, host-wide and per process, as
 * tables or JSON (the equivalent of the kernel module's metrics file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "homad.h"
#include "rt/homad_client.h"
#include "rt/homad_proto.h"

#define HOMAD_PC_NAME(name, desc) #name,
static const char *const proc_names[] = {HOMAD_PROC_COUNTER_LIST(HOMAD_PC_NAME)};
#undef HOMAD_PC_NAME
#define NPROC (sizeof(proc_names) / sizeof(proc_names[0]))

static void json_counters(const char *what, const uint64_t *v, size_t n,
                          const char *(*name)(size_t), const char *const *names)
{
    printf("  \"%s\": {", what);
    for (size_t i = 0; i < n; i++)
        printf("%s\"%s\": %llu", i ? ", " : "", name ? name(i) : names[i],
               (unsigned long long)v[i]);
    printf("}");
}

static void table_counters(const char *what, const uint64_t *v, size_t n,
                           const char *(*name)(size_t))
{
    printf("%s (non-zero):\n", what);
    for (size_t i = 0; i < n; i++)
        if (v[i] != 0) printf("  %-22s %llu\n", name(i), (unsigned long long)v[i]);
}

int homad_stats(const struct homad_opts *o)
{
    struct homa_dc *dc;
    homa_config cfg;
    int rc = homa_dc_connect(o->socket_path, 0, &dc, &cfg);
    if (rc != 0) {
        fprintf(stderr, "homad: no homad at %s: %s\n", o->socket_path, homa_strerror(rc));
        return 1;
    }
    homa_counters eng;
    homa_driver_counters drv;
    rc = homa_dc_counters(dc, &eng, &drv);
    size_t cap = 1u << 20;
    struct homad_proc_row *rows = malloc(cap);
    long len = rc == 0 && rows != NULL ? homa_dc_stats(dc, rows, cap) : HOMA_ERR_NOMEM;
    if (rc != 0 || len < 0) {
        fprintf(stderr, "homad: stats: %s\n", homa_strerror(rc != 0 ? rc : (int)len));
        free(rows);
        homa_dc_destroy(dc);
        return 1;
    }
    size_t nrows = (size_t)len / sizeof(*rows);
    /* The counter structs are arrays of uint64_t in list order. */
    const uint64_t *ev = (const uint64_t *)(const void *)&eng;
    const uint64_t *dv = (const uint64_t *)(const void *)&drv;
    if (o->json) {
        printf("{\n  \"processes\": %zu,\n", nrows);
        json_counters("engine", ev, homa_counter_count(), homa_counter_name, NULL);
        printf(",\n");
        json_counters("driver", dv, homa_driver_counter_count(), homa_driver_counter_name, NULL);
        printf(",\n  \"per_process\": [");
        for (size_t r = 0; r < nrows; r++) {
            const uint64_t *pv = (const uint64_t *)(const void *)&rows[r].pc;
            printf("%s\n    {\"pid\": %d, \"uid\": %u", r ? "," : "", (int)rows[r].pid,
                   (unsigned)rows[r].uid);
            for (size_t i = 0; i < NPROC; i++)
                printf(", \"%s\": %llu", proc_names[i], (unsigned long long)pv[i]);
            printf("}");
        }
        printf("\n  ]\n}\n");
    } else {
        printf("homad at %s: %zu process(es) visible\n\n", o->socket_path, nrows);
        table_counters("engine", ev, homa_counter_count(), homa_counter_name);
        table_counters("driver", dv, homa_driver_counter_count(), homa_driver_counter_name);
        printf("\n%8s %6s %5s %6s %5s %9s %12s %9s %9s %12s %5s %5s %5s\n", "pid", "uid", "ports",
               "rpcs", "slots", "msgs_in", "bytes_in", "requests", "replies", "bytes_out", "bad",
               "quota", "perm");
        for (size_t r = 0; r < nrows; r++) {
            const struct homad_proc_counters *p = &rows[r].pc;
            printf("%8d %6u %5llu %6llu %5llu %9llu %12llu %9llu %9llu %12llu %5llu %5llu "
                   "%5llu\n",
                   (int)rows[r].pid, (unsigned)rows[r].uid, (unsigned long long)p->ports_open,
                   (unsigned long long)p->rpcs_live, (unsigned long long)p->rx_slots_held,
                   (unsigned long long)p->msgs_delivered, (unsigned long long)p->bytes_delivered,
                   (unsigned long long)p->requests_sent, (unsigned long long)p->replies_sent,
                   (unsigned long long)p->bytes_sent, (unsigned long long)p->bad_commands,
                   (unsigned long long)p->quota_refusals, (unsigned long long)p->perm_refusals);
        }
    }
    free(rows);
    homa_dc_destroy(dc);
    return 0;
}
