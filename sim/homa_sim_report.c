/* homa-sim: JSON results (figures: tools/plot/homa-plot draws them from it). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "homa_sim.h"

/* JSON numbers: finite values only (a NaN or infinity becomes null). */
static void num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

/* A key (with its leading separator) and a number. */
static void key_num(FILE *f, const char *key, double v, const char *fmt)
{
    fputs(key, f);
    num(f, v, fmt);
}

/* Numbers separated by ", " (the brackets are the caller's). */
static void num_array(FILE *f, const double *v, int n, const char *fmt)
{
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        num(f, v[i], fmt);
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void hsim_write_json(FILE *f, const struct hsim_result *r, bool with_wall)
{
    const struct hsim_opts *o = &r->opts;
    const homa_config *c = &r->engine;
    fprintf(f, "{\n  \"tool\": \"homa-sim\",\n  \"workload\": ");
    json_str(f, r->workload);
    fprintf(f, ",\n  \"truncate_1mb\": %s,\n  \"load\": ", o->truncate_1mb ? "true" : "false");
    num(f, o->load, "%.4f");
    fprintf(f, ",\n  \"hosts\": %d,\n  \"seed\": %llu,\n", o->hosts, (unsigned long long)o->seed);
    fprintf(f, "  \"slowdown_definition\": \"message completion time (sender application hands "
               "it to the engine -> receiver application has all of it) / ideal one-way time "
               "of that size and path on an idle network (computed: store-and-forward, back-to-"
               "back packets, link and switch delays, rx software delay)\",\n");
    fprintf(f, "  \"short_definition\": \"messages no longer than the 10th percentile of the "
               "workload's sizes (short_cutoff_bytes)\",\n");
    fprintf(f, "  \"config\": {\n");
    fprintf(f, "    \"racks\": %d, \"hosts_per_rack\": %d, \"spines\": %d,\n", o->racks,
            o->hosts_per_rack, o->racks > 1 ? o->spines : 0);
    key_num(f, "    \"host_gbps\": ", (double)o->host_bps / 1e9, "%.6g");
    key_num(f, ", \"uplink_gbps\": ", (double)o->uplink_bps / 1e9, "%.6g");
    fprintf(f,
            ",\n    \"link_delay_ns\": %llu, \"uplink_delay_ns\": %llu, \"switch_delay_ns\": "
            "%llu, \"rx_delay_ns\": %llu,\n",
            (unsigned long long)o->host_link_delay_ns, (unsigned long long)o->uplink_delay_ns,
            (unsigned long long)o->switch_delay_ns, (unsigned long long)o->rx_delay_ns);
    fprintf(f, "    \"overhead_bytes\": %u, \"buffer_bytes\": %llu, \"loss\": ", o->overhead_bytes,
            (unsigned long long)o->port_buffer_bytes);
    num(f, o->loss, "%.6g");
    fprintf(f, ",\n    \"reply\": ");
    if (o->reply_bytes < 0)
        fprintf(f, "\"sampled\"");
    else
        fprintf(f, "%lld", (long long)o->reply_bytes);
    key_num(f, ", \"warmup_ms\": ", o->warmup_ms, "%.6g");
    key_num(f, ", \"measure_ms\": ", o->measure_ms, "%.6g");
    key_num(f, ", \"drain_ms\": ", o->drain_ms, "%.6g");
    fprintf(f,
            ",\n    \"max_payload\": %u, \"unsched_bytes\": %u, \"grant_window\": %u, "
            "\"max_overcommit\": %u, \"max_incoming\": %u, \"grant_fifo_permille\": %u,\n",
            c->max_payload, c->unsched_bytes, c->grant_window ? c->grant_window : c->unsched_bytes,
            c->max_overcommit, c->max_incoming, c->grant_fifo_permille);
    fprintf(f,
            "    \"tick_ns\": %llu, \"resend_ticks\": %u, \"resend_interval\": %u, "
            "\"gap_resend_ticks\": %u, \"timeout_ticks\": %u,\n",
            (unsigned long long)c->tick_ns, c->resend_ticks, c->resend_interval,
            c->gap_resend_ticks, c->timeout_ticks);
    fprintf(f, "    \"num_priorities\": %u, \"unsched_levels\": %d, \"unsched_cutoffs\": [",
            c->num_priorities, r->unsched_levels);
    for (int i = 0; i < 8; i++)
        fprintf(f, "%s%u", i ? ", " : "", c->unsched_cutoffs[i]);
    fprintf(f, "], \"adaptive_cutoffs\": %s, \"sender_driven\": %s,\n",
            c->adaptive_cutoffs ? "true" : "false", o->sender_driven ? "true" : "false");
    fprintf(f, "    \"load_counts_grants\": %s,\n", o->load_counts_grants ? "true" : "false");
    key_num(f, "    \"rtt_ns\": ", r->rtt_ns, "%.1f");
    fprintf(f, ", \"rtt_bytes\": %u, \"rpc_rate_per_host\": ", r->rtt_bytes);
    num(f, r->rpc_rate, "%.1f");
    key_num(f, ", \"mean_message_bytes\": ", r->mean_msg_bytes, "%.1f");
    fprintf(f, "\n  },\n");

    fprintf(f, "  \"short_cutoff_bytes\": %u,\n  \"short_count\": %llu,\n", r->short_cutoff,
            (unsigned long long)r->short_count);
    key_num(f, "  \"short_p50_slowdown\": ", r->short_p50, "%.4f");
    key_num(f, ",\n  \"short_p99_slowdown\": ", r->short_p99, "%.4f");
    key_num(f, ",\n  \"short_mean_slowdown\": ", r->short_mean, "%.4f");
    key_num(f, ",\n  \"short_p50_us\": ", r->short_p50_us, "%.3f");
    key_num(f, ",\n  \"short_p99_us\": ", r->short_p99_us, "%.3f");
    key_num(f, ",\n  \"all_p50_slowdown\": ", r->all_p50, "%.4f");
    key_num(f, ",\n  \"all_p99_slowdown\": ", r->all_p99, "%.4f");
    key_num(f, ",\n  \"mean_slowdown\": ", r->all_mean, "%.4f");
    fprintf(f,
            ",\n  \"messages\": {\"measured\": %llu, \"completed\": %llu, \"incomplete\": %llu, "
            "\"failed\": %llu, \"send_errors\": %llu},\n",
            (unsigned long long)r->measured, (unsigned long long)r->completed,
            (unsigned long long)r->incomplete, (unsigned long long)r->failed,
            (unsigned long long)r->send_errors);
    fprintf(f, "  \"buckets\": [\n");
    for (int b = 0; b < r->nbuckets; b++) {
        const struct hsim_bucket *k = &r->bucket[b];
        fprintf(f, "    {\"min_bytes\": %u, \"max_bytes\": %u, \"count\": %llu, ", k->min_bytes,
                k->max_bytes, (unsigned long long)k->count);
        key_num(f, "\"p50_slowdown\": ", k->p50, "%.4f");
        key_num(f, ", \"p99_slowdown\": ", k->p99, "%.4f");
        key_num(f, ", \"mean_slowdown\": ", k->mean, "%.4f");
        fprintf(f, "}%s\n", b + 1 < r->nbuckets ? "," : "");
    }
    key_num(f, "  ],\n  \"offered_load\": ", r->offered_load, "%.4f");
    key_num(f, ",\n  \"achieved_load\": ", r->achieved_load, "%.4f");
    key_num(f, ",\n  \"offered_load_with_grants\": ", r->offered_load_grants, "%.4f");
    key_num(f, ",\n  \"achieved_load_with_grants\": ", r->achieved_load_grants, "%.4f");
    key_num(f, ",\n  \"downlink_utilization\": ", r->downlink_util, "%.4f");
    key_num(f, ",\n  \"uplink_utilization\": ", r->uplink_util, "%.4f");
    fprintf(f,
            ",\n  \"drops\": %llu,\n  \"loss_drops\": %llu,\n  \"resends\": %llu,\n"
            "  \"retransmitted_packets\": %llu,\n  \"grants\": %llu,\n  \"timeouts\": %llu,\n"
            "  \"engine_refusals\": %llu,\n  \"max_port_queue_bytes\": %llu,\n"
            "  \"max_downlink_queue_bytes\": %llu,\n",
            (unsigned long long)r->drops, (unsigned long long)r->loss_drops,
            (unsigned long long)r->resends, (unsigned long long)r->retransmits,
            (unsigned long long)r->grants, (unsigned long long)r->timeouts,
            (unsigned long long)r->engine_drops, (unsigned long long)r->max_port_bytes,
            (unsigned long long)r->max_downlink_bytes);
    fprintf(f, "  \"cutoff_updates\": %llu,\n", (unsigned long long)r->cutoff_updates);
    fprintf(f, "  \"backlog_mb\": [");
    num_array(f, r->backlog_mb, r->nbacklog, "%.3f");
    key_num(f, "],\n  \"backlog_slope_mb_per_ms\": ", r->backlog_slope, "%.4f");
    key_num(f, ",\n  \"backlog_end_mb\": ", r->backlog_end_mb, "%.3f");
    fprintf(f, ",\n  \"achieved_load_intervals\": [");
    num_array(f, r->load_intervals, r->nbacklog, "%.4f");
    key_num(f, "],\n  \"achieved_load_last_quarter\": ", r->load_last_quarter, "%.4f");
    if (r->has_queue_stats) {
        fprintf(f, ",\n  \"queue_stats\": {\"samples\": %llu, \"rx_idle_pending\": ",
                (unsigned long long)r->qs_samples);
        num(f, r->qs_rx_idle_pending, "%.4f");
        key_num(f, ", \"rx_idle_empty\": ", r->qs_rx_idle_empty, "%.4f");
        key_num(f, ", \"tx_idle_unsent\": ", r->qs_tx_idle_unsent, "%.4f");
        key_num(f, ", \"tx_idle_empty\": ", r->qs_tx_idle_empty, "%.4f");
        key_num(f, ", \"tx_idle_to_idle_receiver\": ", r->qs_both_idle, "%.4f");
        key_num(f, ", \"rx_grantable_mean\": ", r->qs_rx_grantable, "%.3f");
        key_num(f, ", \"rx_grantable_senders_mean\": ", r->qs_rx_peers, "%.3f");
        key_num(f, ", \"tx_unsent_msgs_mean\": ", r->qs_tx_msgs, "%.3f");
        fputs("}", f);
    }
    fprintf(f, ",\n  \"failures\": [");
    for (int i = 0; i < r->nfailures; i++) {
        const struct hsim_failure *x = &r->failures[i];
        fprintf(f,
                "%s\n    {\"src\": %d, \"dst\": %d, \"request_bytes\": %u, \"response_bytes\": "
                "%u, \"lost\": \"%s\", \"start_ms\": %.3f, \"failed_ms\": %.3f, \"error\": %d}",
                i ? "," : "", x->src, x->dst, x->req_len, x->resp_len,
                x->in_response ? "response" : "request", x->start_ms, x->failed_ms, x->error);
    }
    fprintf(f, "%s]", r->nfailures ? "\n  " : "");
    fprintf(f, ",\n  \"stopped_early\": %s", r->stopped_early ? "true" : "false");
    key_num(f, ",\n  \"sim_time_s\": ", r->sim_s, "%.6f");
    fprintf(f, ",\n  \"events\": %llu,\n  \"packets\": %llu", (unsigned long long)r->events,
            (unsigned long long)r->packets);
    if (with_wall) {
        /* the only fields that differ between runs of the same seed */
        key_num(f, ",\n  \"wall\": {\"wall_time_s\": ", r->wall_s, "%.3f");
        key_num(f, ", \"events_per_s\": ", r->events_per_s, "%.0f");
        key_num(f, ", \"packets_per_s\": ", r->packets_per_s, "%.0f");
        key_num(f, ", \"peak_rss_mb\": ", r->peak_rss_mb, "%.1f");
        fprintf(f, "}");
    }
    fprintf(f, "\n}\n");
}

const char *hsim_fluid_order_name(int order)
{
    return order == HSIM_FLUID_FIFO ? "fifo" : order == HSIM_FLUID_SRPT ? "srpt" : "?";
}

void hsim_fluid_write_json(FILE *f, const struct hsim_fluid_opts *fo,
                           const struct hsim_fluid_result *r, bool with_wall)
{
    fprintf(f, "  {\"model\": \"fluid\", \"workload\": ");
    json_str(f, fo->workload);
    fprintf(f, ", \"order\": \"%s\", \"hosts\": %d, \"load\": ", hsim_fluid_order_name(fo->order),
            fo->hosts);
    num(f, fo->load, "%.4f");
    fprintf(f, ", \"overcommit\": %d, \"seed\": %llu, \"warmup_s\": ", fo->overcommit,
            (unsigned long long)fo->seed);
    num(f, fo->warmup_s, "%.6f");
    key_num(f, ", \"seconds\": ", fo->seconds, "%.6f");
    key_num(f, ",\n   \"mean_message_bytes\": ", r->mean_msg_bytes, "%.1f");
    key_num(f, ", \"offered_load\": ", r->offered_load, "%.4f");
    key_num(f, ", \"achieved_load\": ", r->achieved_load, "%.4f");
    key_num(f, ", \"achieved_load_last_quarter\": ", r->load_last_quarter, "%.4f");
    fprintf(f, ",\n   \"achieved_load_intervals\": [");
    num_array(f, r->load_intervals, 20, "%.4f");
    fprintf(f, "],\n   \"backlog_mb\": [");
    num_array(f, r->backlog_mb, 20, "%.1f");
    key_num(f, "],\n   \"backlog_slope_mb_per_ms\": ", r->backlog_slope, "%.4f");
    key_num(f, ", \"rx_idle_pending\": ", r->rx_idle_pending, "%.4f");
    key_num(f, ", \"rx_idle_empty\": ", r->rx_idle_empty, "%.4f");
    fprintf(f,
            ",\n   \"arrivals\": %llu, \"completed\": %llu, \"events\": %llu, "
            "\"max_active\": %zu, \"active_end\": %zu",
            (unsigned long long)r->arrivals, (unsigned long long)r->completed,
            (unsigned long long)r->events, r->max_active, r->active_end);
    if (with_wall) {
        key_num(f, ", \"wall_time_s\": ", r->wall_s, "%.2f");
    }
    fprintf(f, "}");
}
