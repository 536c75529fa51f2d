/* homa-perf: results (merging, human-readable summary, JSON). */
#include "perf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json.h"

void perf_result_init(perf_result *r)
{
    memset(r, 0, sizeof(*r));
    hist_init(&r->lat);
    hist_init(&r->lag);
    hist_init(&r->slow);
    for (int i = 0; i < PERF_MAX_BUCKETS; i++) {
        hist_init(&r->buckets[i].lat);
        hist_init(&r->buckets[i].slow);
    }
}

void perf_result_free(perf_result *r)
{
    hist_free(&r->lat);
    hist_free(&r->lag);
    hist_free(&r->slow);
    for (int i = 0; i < PERF_MAX_BUCKETS; i++) {
        hist_free(&r->buckets[i].lat);
        hist_free(&r->buckets[i].slow);
    }
}

void perf_result_fail(perf_result *r, int code, uint64_t count)
{
    int i = 0;
    while (i < r->nfail_kinds && r->fail_code[i] != code)
        i++;
    if (i == r->nfail_kinds) {
        if (r->nfail_kinds < PERF_MAX_FAIL_KINDS) {
            r->nfail_kinds++;
            r->fail_code[i] = code;
            r->fail_count[i] = 0;
        } else {
            i = PERF_MAX_FAIL_KINDS - 1;
            r->fail_code[i] = 0;
        }
    }
    r->fail_count[i] += count;
    r->failed += count;
}

void perf_result_merge(perf_result *dst, const perf_result *src)
{
    dst->rpcs += src->rpcs;
    for (int i = 0; i < src->nfail_kinds; i++)
        perf_result_fail(dst, src->fail_code[i], src->fail_count[i]);
    dst->mismatches += src->mismatches;
    dst->unfinished += src->unfinished;
    dst->bytes += src->bytes;
    hist_merge(&dst->lat, &src->lat);
    hist_merge(&dst->lag, &src->lag);
    hist_merge(&dst->slow, &src->slow);
    for (int i = 0; i < src->nbuckets && i < dst->nbuckets; i++) {
        hist_merge(&dst->buckets[i].lat, &src->buckets[i].lat);
        hist_merge(&dst->buckets[i].slow, &src->buckets[i].slow);
    }
}

double perf_result_gbps(const perf_result *r)
{
    return r->window_s > 0 ? (double)r->bytes * 8.0 / r->window_s / 1e9 : 0.0;
}

double perf_result_rate(const perf_result *r)
{
    return r->window_s > 0 ? (double)r->rpcs / r->window_s : 0.0;
}

const char *perf_proto_name(int proto)
{
    return proto == PERF_TCP ? "tcp" : "homa";
}

const char *perf_test_name(int test)
{
    return test == TEST_TPUT ? "tput" : test == TEST_WORKLOAD ? "workload" : "rtt";
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

static double q_us(const hist *h, double q)
{
    return us(hist_quantile(h, q));
}

static double slow_q(const hist *h, double q)
{
    return h->count ? (double)hist_quantile(h, q) / 1000.0 : NAN;
}

static int verified(const perf_result *r)
{
    return r->verify && r->errors == 0 && r->rpcs > 0 && !r->fatal[0];
}

static const char *const perf_slowdown_method =
    "slowdown = rtt / best(size); best(size) interpolates, piecewise linearly in size, the "
    "minimum rtt of unloaded one-at-a-time RPCs measured at startup (same protocol, same "
    "server) at the smallest size, every bucket's upper bound and a x4 grid between";

void perf_print_human(const perf_opts *o, const perf_result *r)
{
    (void)o;
    const char *p = perf_proto_name(r->proto);
    if (r->test == TEST_WORKLOAD) {
        printf("%s workload %s: open-loop Poisson arrivals, %.3g Gb/s of requests offered "
               "(responses echo the request), lengths clamped to %u B (mean %.0f B), %d client "
               "thread(s)",
               p, r->workload, r->offered_gbps, r->max_size, r->mean_size, r->threads);
        if (r->proto == PERF_TCP) printf(", %d connection(s) per thread, pipelined", r->conns);
        printf("\n");
    } else {
        printf("%s %s: %zu-byte requests and responses, %d outstanding x %d client thread(s)", p,
               perf_test_name(r->test), r->size, r->outstanding, r->threads);
        if (r->proto == PERF_TCP) printf(" (%d connection(s) per thread, 1 RPC each)", r->conns);
        printf("\n");
    }
    printf("  window      %.3f s, busy poll %d us\n", r->window_s, r->busy_poll_us);
    printf("  rpcs        %llu (%.1f/s)\n", (unsigned long long)r->rpcs, perf_result_rate(r));
    printf("  errors      %llu (failed %llu, mismatched %llu, unfinished %llu)   verified: %s\n",
           (unsigned long long)r->errors, (unsigned long long)r->failed,
           (unsigned long long)r->mismatches, (unsigned long long)r->unfinished,
           verified(r) ? "yes"
           : r->verify ? "NO"
                       : "not requested");
    for (int i = 0; i < r->nfail_kinds; i++)
        printf("  failed      %llu: %s\n", (unsigned long long)r->fail_count[i],
               r->fail_code[i] ? pt_strerror(r->proto, r->fail_code[i]) : "other errors");
    if (r->lat.count)
        printf("  latency us  min %.2f  p50 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  mean %.2f\n",
               us(r->lat.min), q_us(&r->lat, 0.5), q_us(&r->lat, 0.99), q_us(&r->lat, 0.999),
               us(r->lat.max), hist_mean(&r->lat) / 1000.0);
    printf("  goodput     %.3f Gb/s (request + response payload bytes)\n", perf_result_gbps(r));
    if (r->test == TEST_WORKLOAD) {
        if (r->lag.count)
            printf("  send lag us p50 %.2f  p99 %.2f  max %.2f (send time - scheduled arrival)\n",
                   q_us(&r->lag, 0.5), q_us(&r->lag, 0.99), us(r->lag.max));
        if (r->slow.count)
            printf("  slowdown    mean %.2f  p50 %.2f  p99 %.2f\n", hist_mean(&r->slow) / 1000.0,
                   slow_q(&r->slow, 0.5), slow_q(&r->slow, 0.99));
        printf("  %-21s %6s %9s %10s %10s %8s %8s\n", "bucket (bytes)", "share", "rpcs", "p50 us",
               "p99 us", "sd p50", "sd p99");
        for (int i = 0; i < r->nbuckets; i++) {
            const perf_bucket *b = &r->buckets[i];
            char range[32];
            snprintf(range, sizeof(range), "%u-%u", b->lo + 1, b->hi);
            printf("  %-21s %5.1f%% %9llu %10.2f %10.2f %8.2f %8.2f\n", range, b->fraction * 100,
                   (unsigned long long)b->lat.count, q_us(&b->lat, 0.5), q_us(&b->lat, 0.99),
                   slow_q(&b->slow, 0.5), slow_q(&b->slow, 0.99));
        }
        if (r->ncal) {
            printf("  best-case rtt (unloaded minimum):");
            for (int i = 0; i < r->ncal; i++)
                if (r->cal[i].samples) printf(" %uB=%.1fus", r->cal[i].size, us(r->cal[i].min_ns));
            printf("\n");
        }
    }
    if (r->fatal[0]) printf("  FAILED: %s\n", r->fatal);
}

static void json_lat(json_writer *j, const char *key, const hist *h)
{
    json_obj_begin(j, key);
    json_num(j, "min", h->count ? us(h->min) : 0);
    json_num(j, "mean", hist_mean(h) / 1000.0);
    json_num(j, "p50", q_us(h, 0.5));
    json_num(j, "p90", q_us(h, 0.9));
    json_num(j, "p99", q_us(h, 0.99));
    json_num(j, "p999", q_us(h, 0.999));
    json_num(j, "max", h->count ? us(h->max) : 0);
    json_obj_end(j);
}

void perf_json_result(json_writer *j, const char *key, const perf_opts *o, const perf_result *r)
{
    (void)o;
    json_obj_begin(j, key);
    json_str(j, "proto", perf_proto_name(r->proto));
    json_str(j, "test", perf_test_name(r->test));
    if (r->test != TEST_WORKLOAD) {
        json_u64(j, "size", r->size);
        json_i64(j, "outstanding", r->outstanding);
    }
    json_i64(j, "threads", r->threads);
    if (r->proto == PERF_TCP) json_i64(j, "tcp_connections", r->conns);
    json_i64(j, "busy_poll_us", r->busy_poll_us);
    json_num(j, "seconds", r->window_s);
    json_u64(j, "rpcs", r->rpcs);
    json_u64(j, "errors", r->errors);
    json_u64(j, "failed", r->failed);
    json_arr_begin(j, "failures");
    for (int i = 0; i < r->nfail_kinds; i++) {
        json_obj_begin(j, NULL);
        json_i64(j, "code", r->fail_code[i]);
        json_str(j, "error",
                 r->fail_code[i] ? pt_strerror(r->proto, r->fail_code[i]) : "other errors");
        json_u64(j, "count", r->fail_count[i]);
        json_obj_end(j);
    }
    json_arr_end(j);
    json_u64(j, "mismatches", r->mismatches);
    json_u64(j, "unfinished", r->unfinished);
    json_bool(j, "verify", r->verify);
    json_bool(j, "verified", verified(r));
    json_lat(j, "latency_us", &r->lat);
    json_num(j, "gbps", perf_result_gbps(r));
    json_str(j, "gbps_counts", "request+response payload bytes");
    json_num(j, "rpcs_per_sec", perf_result_rate(r));
    if (r->test == TEST_WORKLOAD) {
        json_str(j, "workload", r->workload);
        json_u64(j, "max_size", r->max_size);
        json_num(j, "mean_size", r->mean_size);
        json_num(j, "offered_gbps", r->offered_gbps);
        json_str(j, "offered_counts", "request payload bytes");
        json_lat(j, "send_lag_us", &r->lag);
        json_obj_begin(j, "slowdown");
        json_num(j, "mean", r->slow.count ? hist_mean(&r->slow) / 1000.0 : NAN);
        json_num(j, "p50", slow_q(&r->slow, 0.5));
        json_num(j, "p99", slow_q(&r->slow, 0.99));
        json_num(j, "p999", slow_q(&r->slow, 0.999));
        json_obj_end(j);
        json_str(j, "slowdown_method", perf_slowdown_method);
        json_str(j, "buckets_method", "workload deciles of message length (equal deciles merged)");
        json_arr_begin(j, "buckets");
        for (int i = 0; i < r->nbuckets; i++) {
            const perf_bucket *b = &r->buckets[i];
            json_obj_begin(j, NULL);
            json_u64(j, "min_bytes", (uint64_t)b->lo + 1);
            json_u64(j, "max_bytes", b->hi);
            json_num(j, "fraction", b->fraction);
            json_u64(j, "rpcs", b->lat.count);
            json_num(j, "p50_us", q_us(&b->lat, 0.5));
            json_num(j, "p99_us", q_us(&b->lat, 0.99));
            json_num(j, "slowdown_mean", b->slow.count ? hist_mean(&b->slow) / 1000.0 : NAN);
            json_num(j, "slowdown_p50", slow_q(&b->slow, 0.5));
            json_num(j, "slowdown_p99", slow_q(&b->slow, 0.99));
            json_obj_end(j);
        }
        json_arr_end(j);
        json_arr_begin(j, "calibration");
        for (int i = 0; i < r->ncal; i++) {
            json_obj_begin(j, NULL);
            json_u64(j, "bytes", r->cal[i].size);
            json_num(j, "min_rtt_us", us(r->cal[i].min_ns));
            json_u64(j, "samples", r->cal[i].samples);
            json_obj_end(j);
        }
        json_arr_end(j);
    }
    if (r->fatal[0])
        json_str(j, "error", r->fatal);
    else
        json_null(j, "error");
    json_obj_end(j);
}
