/* homa-sim: JSON results and plots. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "homa_sim.h"
#include "plot.h"

/* JSON numbers: finite values only (a NaN or infinity becomes null). */
static void num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
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
    fprintf(f, "    \"host_gbps\": ");
    num(f, (double)o->host_bps / 1e9, "%.6g");
    fprintf(f, ", \"uplink_gbps\": ");
    num(f, (double)o->uplink_bps / 1e9, "%.6g");
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
    fprintf(f, ", \"warmup_ms\": ");
    num(f, o->warmup_ms, "%.6g");
    fprintf(f, ", \"measure_ms\": ");
    num(f, o->measure_ms, "%.6g");
    fprintf(f, ", \"drain_ms\": ");
    num(f, o->drain_ms, "%.6g");
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
    fprintf(f, "    \"rtt_ns\": ");
    num(f, r->rtt_ns, "%.1f");
    fprintf(f, ", \"rtt_bytes\": %u, \"rpc_rate_per_host\": ", r->rtt_bytes);
    num(f, r->rpc_rate, "%.1f");
    fprintf(f, ", \"mean_message_bytes\": ");
    num(f, r->mean_msg_bytes, "%.1f");
    fprintf(f, "\n  },\n");

    fprintf(f, "  \"short_cutoff_bytes\": %u,\n  \"short_count\": %llu,\n", r->short_cutoff,
            (unsigned long long)r->short_count);
    fprintf(f, "  \"short_p50_slowdown\": ");
    num(f, r->short_p50, "%.4f");
    fprintf(f, ",\n  \"short_p99_slowdown\": ");
    num(f, r->short_p99, "%.4f");
    fprintf(f, ",\n  \"short_mean_slowdown\": ");
    num(f, r->short_mean, "%.4f");
    fprintf(f, ",\n  \"short_p50_us\": ");
    num(f, r->short_p50_us, "%.3f");
    fprintf(f, ",\n  \"short_p99_us\": ");
    num(f, r->short_p99_us, "%.3f");
    fprintf(f, ",\n  \"all_p50_slowdown\": ");
    num(f, r->all_p50, "%.4f");
    fprintf(f, ",\n  \"all_p99_slowdown\": ");
    num(f, r->all_p99, "%.4f");
    fprintf(f, ",\n  \"mean_slowdown\": ");
    num(f, r->all_mean, "%.4f");
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
        fprintf(f, "\"p50_slowdown\": ");
        num(f, k->p50, "%.4f");
        fprintf(f, ", \"p99_slowdown\": ");
        num(f, k->p99, "%.4f");
        fprintf(f, ", \"mean_slowdown\": ");
        num(f, k->mean, "%.4f");
        fprintf(f, "}%s\n", b + 1 < r->nbuckets ? "," : "");
    }
    fprintf(f, "  ],\n  \"offered_load\": ");
    num(f, r->offered_load, "%.4f");
    fprintf(f, ",\n  \"achieved_load\": ");
    num(f, r->achieved_load, "%.4f");
    fprintf(f, ",\n  \"offered_load_with_grants\": ");
    num(f, r->offered_load_grants, "%.4f");
    fprintf(f, ",\n  \"achieved_load_with_grants\": ");
    num(f, r->achieved_load_grants, "%.4f");
    fprintf(f, ",\n  \"downlink_utilization\": ");
    num(f, r->downlink_util, "%.4f");
    fprintf(f, ",\n  \"uplink_utilization\": ");
    num(f, r->uplink_util, "%.4f");
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
    for (int k = 0; k < r->nbacklog; k++) {
        if (k) fputs(", ", f);
        num(f, r->backlog_mb[k], "%.3f");
    }
    fprintf(f, "],\n  \"backlog_slope_mb_per_ms\": ");
    num(f, r->backlog_slope, "%.4f");
    fprintf(f, ",\n  \"backlog_end_mb\": ");
    num(f, r->backlog_end_mb, "%.3f");
    fprintf(f, ",\n  \"achieved_load_slices\": [");
    for (int k = 0; k < r->nbacklog; k++) {
        if (k) fputs(", ", f);
        num(f, r->load_slices[k], "%.4f");
    }
    fprintf(f, "],\n  \"achieved_load_last_quarter\": ");
    num(f, r->load_last_quarter, "%.4f");
    if (r->has_queue_stats) {
        fprintf(f, ",\n  \"queue_stats\": {\"samples\": %llu, \"rx_idle_pending\": ",
                (unsigned long long)r->qs_samples);
        num(f, r->qs_rx_idle_pending, "%.4f");
        fprintf(f, ", \"rx_idle_empty\": ");
        num(f, r->qs_rx_idle_empty, "%.4f");
        fprintf(f, ", \"tx_idle_unsent\": ");
        num(f, r->qs_tx_idle_unsent, "%.4f");
        fprintf(f, ", \"tx_idle_empty\": ");
        num(f, r->qs_tx_idle_empty, "%.4f");
        fprintf(f, ", \"tx_idle_to_idle_receiver\": ");
        num(f, r->qs_both_idle, "%.4f");
        fprintf(f, ", \"rx_grantable_mean\": ");
        num(f, r->qs_rx_grantable, "%.3f");
        fprintf(f, ", \"rx_grantable_senders_mean\": ");
        num(f, r->qs_rx_peers, "%.3f");
        fprintf(f, ", \"tx_unsent_msgs_mean\": ");
        num(f, r->qs_tx_msgs, "%.3f");
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
    fprintf(f, ",\n  \"sim_time_s\": ");
    num(f, r->sim_s, "%.6f");
    fprintf(f, ",\n  \"events\": %llu,\n  \"packets\": %llu", (unsigned long long)r->events,
            (unsigned long long)r->packets);
    if (with_wall) {
        /* the only fields that differ between runs of the same seed */
        fprintf(f, ",\n  \"wall\": {\"wall_time_s\": ");
        num(f, r->wall_s, "%.3f");
        fprintf(f, ", \"events_per_s\": ");
        num(f, r->events_per_s, "%.0f");
        fprintf(f, ", \"packets_per_s\": ");
        num(f, r->packets_per_s, "%.0f");
        fprintf(f, ", \"peak_rss_mb\": ");
        num(f, r->peak_rss_mb, "%.1f");
        fprintf(f, "}");
    }
    fprintf(f, "\n}\n");
}

int hsim_plot(const char *path, const struct hsim_result *r, int n, const char *const *labels,
              const char *title)
{
    if (!r || n < 1 || n > 16) {
        errno = EINVAL;
        return -1;
    }
    struct plot_series ser[33];
    double xs[16][HSIM_MAX_BUCKETS], y50[16][HSIM_MAX_BUCKETS], y99[16][HSIM_MAX_BUCKETS];
    char lab[33][96];
    int ns = 0;
    for (int i = 0; i < n; i++) {
        const struct hsim_result *q = &r[i];
        int m = 0;
        for (int b = 0; b < q->nbuckets; b++) {
            if (q->bucket[b].count == 0) continue;
            xs[i][m] = q->bucket[b].max_bytes > 0 ? q->bucket[b].max_bytes : 1;
            y50[i][m] = q->bucket[b].p50;
            y99[i][m] = q->bucket[b].p99;
            m++;
        }
        const char *name = labels && labels[i] ? labels[i] : q->workload;
        if (n == 1) {
            snprintf(lab[ns], sizeof(lab[ns]), "p99 slowdown");
            ser[ns] =
                (struct plot_series){lab[ns], plot_color(1), xs[i], y99[i], (size_t)m, false, true};
            ns++;
            snprintf(lab[ns], sizeof(lab[ns]), "p50 slowdown");
            ser[ns] =
                (struct plot_series){lab[ns], plot_color(0), xs[i], y50[i], (size_t)m, false, true};
            ns++;
        } else {
            snprintf(lab[ns], sizeof(lab[ns]), "%s p99", name);
            ser[ns] = (struct plot_series){
                lab[ns], plot_color((size_t)i), xs[i], y99[i], (size_t)m, false, true};
            ns++;
        }
    }
    /* the goal for short messages: p99 slowdown 3.5 */
    static double gx[2] = {1, 1e9}, gy[2] = {3.5, 3.5};
    ser[ns++] = (struct plot_series){"3.5 (goal, short msgs)", 0x777777, gx, gy, 2, true, false};
    double ymax = 4;
    for (int i = 0; i < ns - 1; i++)
        for (size_t j = 0; j < ser[i].n; j++)
            if (ser[i].y[j] > ymax) ymax = ser[i].y[j];
    double xmin = 1e12, xmax = 1;
    for (int i = 0; i < ns - 1; i++)
        for (size_t j = 0; j < ser[i].n; j++) {
            if (ser[i].x[j] < xmin) xmin = ser[i].x[j];
            if (ser[i].x[j] > xmax) xmax = ser[i].x[j];
        }
    if (xmin > xmax) xmin = 1, xmax = 10;
    struct plot_spec sp = {
        .title = title,
        .x = {"message size (bytes, upper edge of each size bucket)", true,
              pow(10, floor(log10(xmin))), pow(10, ceil(log10(xmax)))},
        .y = {"slowdown (completion time / ideal)", true, 1, pow(10, ceil(log10(ymax * 1.05)))},
        .series = ser,
        .nseries = (size_t)ns,
    };
    if (sp.x.max <= sp.x.min) sp.x.max = sp.x.min * 10;
    return plot_write_png(path, &sp);
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
    fprintf(f, ", \"seed\": %llu, \"warmup_s\": ", (unsigned long long)fo->seed);
    num(f, fo->warmup_s, "%.6f");
    fprintf(f, ", \"seconds\": ");
    num(f, fo->seconds, "%.6f");
    fprintf(f, ",\n   \"mean_message_bytes\": ");
    num(f, r->mean_msg_bytes, "%.1f");
    fprintf(f, ", \"offered_load\": ");
    num(f, r->offered_load, "%.4f");
    fprintf(f, ", \"achieved_load\": ");
    num(f, r->achieved_load, "%.4f");
    fprintf(f, ", \"achieved_load_last_quarter\": ");
    num(f, r->load_last_quarter, "%.4f");
    fprintf(f, ",\n   \"achieved_load_slices\": [");
    for (int i = 0; i < 20; i++) {
        if (i) fputs(", ", f);
        num(f, r->load_slices[i], "%.4f");
    }
    fprintf(f, "],\n   \"backlog_mb\": [");
    for (int i = 0; i < 20; i++) {
        if (i) fputs(", ", f);
        num(f, r->backlog_mb[i], "%.1f");
    }
    fprintf(f, "],\n   \"backlog_slope_mb_per_ms\": ");
    num(f, r->backlog_slope, "%.4f");
    fprintf(f, ", \"rx_idle_pending\": ");
    num(f, r->rx_idle_pending, "%.4f");
    fprintf(f, ", \"rx_idle_empty\": ");
    num(f, r->rx_idle_empty, "%.4f");
    fprintf(f,
            ",\n   \"arrivals\": %llu, \"completed\": %llu, \"events\": %llu, "
            "\"max_active\": %zu, \"active_end\": %zu",
            (unsigned long long)r->arrivals, (unsigned long long)r->completed,
            (unsigned long long)r->events, r->max_active, r->active_end);
    if (with_wall) {
        fprintf(f, ", \"wall_time_s\": ");
        num(f, r->wall_s, "%.2f");
    }
    fprintf(f, "}");
}
