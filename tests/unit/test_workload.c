/* Unit tests for src/util/workload.c (homa/workload.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <homa/workload.h>

#ifndef HOMA_DATA_DIR
#error "HOMA_DATA_DIR must point at the repository's data/ directory"
#endif
#define WORKLOAD_DIR HOMA_DATA_DIR "/workloads"

/* Exact means computed from the shipped CDFs (bytes), full and truncated at
 * 1,000,000 bytes, and the figures PROTOCOL.md quotes. */
static const struct {
    const char *name;
    size_t points;
    uint32_t min, max;
    double mean, mean_trunc;
    double paper_mean;       /* PROTOCOL.md */
    double paper_mean_trunc; /* PROTOCOL.md (W4/W5 only; 0 = not quoted) */
} expected[5] = {
    {"w1", 300, 8, 100000, 189.2, 189.2, 189, 0},
    {"w2", 152, 8, 3529904, 441.6, 433.3, 442, 0},
    {"w3", 842, 8, 15158197, 2927.7, 2423.1, 2900, 0},
    {"w4", 460, 53, 10000000, 127796.6, 60175.1, 128000, 61000},
    {"w5", 400, 1430, 29400000, 2564689.7, 385315.5, 2600000, 386000},
};

static int close_rel(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want);
}

/* Local, fixed-seed PRNG (splitmix64) so results are reproducible. */
static uint64_t rng_state;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void)
{
    return (double)(rng_next() >> 11) * 0x1.0p-53; /* [0, 1) */
}

/* Writes content to a fresh temporary file; returns its path (static). */
static const char *write_temp(const char *content)
{
    static char path[256];
    const char *tmpdir = getenv("TMPDIR");
    snprintf(path, sizeof(path), "%s/test_workload_XXXXXX.cdf",
             tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    size_t len = strlen(content);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    close(fd);
    return path;
}

static int load_text(const char *content, homa_workload **w)
{
    const char *path = write_temp(content);
    int err = homa_workload_load_file(path, w);
    unlink(path);
    return err;
}

static void homa_workload_load_file__all_shipped(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s.cdf", WORKLOAD_DIR, expected[i].name);
        homa_workload *w = NULL;
        int err = homa_workload_load_file(path, &w);
        if (err) fprintf(stderr, "%s\n", homa_workload_errmsg());
        assert_int_equal(err, 0);
        assert_non_null(w);
        assert_string_equal(homa_workload_errmsg(), "");
        assert_string_equal(homa_workload_name(w), expected[i].name);
        assert_int_equal(homa_workload_points(w), expected[i].points);
        assert_int_equal(homa_workload_min_size(w), expected[i].min);
        assert_int_equal(homa_workload_max_size(w), expected[i].max);
        double f;
        uint32_t b;
        assert_int_equal(homa_workload_point(w, expected[i].points - 1, &b, &f), 0);
        assert_int_equal(b, expected[i].max);
        assert_true(f == 1.0);
        assert_int_equal(homa_workload_point(w, expected[i].points, &b, &f), HOMA_ERR_INVAL);
        homa_workload_free(w);
    }
}

static void homa_workload_mean__matches_protocol_figures(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        homa_workload *w = NULL;
        assert_int_equal(homa_workload_load(expected[i].name, HOMA_DATA_DIR, NULL, &w), 0);
        double full = homa_workload_mean(w, HOMA_WORKLOAD_NO_MAX);
        double trunc = homa_workload_mean(w, HOMA_WORKLOAD_LINUX_MAX);
        printf("%s: %zu points, mean %.1f B, mean truncated at 1 MB %.1f B, "
               "10%% quantile %u B\n",
               expected[i].name, homa_workload_points(w), full, trunc,
               homa_workload_quantile(w, 0.10, HOMA_WORKLOAD_NO_MAX));
        assert_true(close_rel(full, expected[i].mean, 0.001));
        assert_true(close_rel(trunc, expected[i].mean_trunc, 0.001));
        /* PROTOCOL.md rounds its figures; W4 truncated is quoted as "about 61 KB"
         * while the CDF gives 60.2 KB. */
        assert_true(close_rel(full, expected[i].paper_mean, 0.03));
        if (expected[i].paper_mean_trunc > 0)
            assert_true(close_rel(trunc, expected[i].paper_mean_trunc, 0.03));
        assert_true(trunc <= full);
        homa_workload_free(w);
    }
}

/* Standard deviation of the (possibly truncated) length, from the CDF points. */
static double workload_stddev(const homa_workload *w, uint32_t max)
{
    double mean = homa_workload_mean(w, max), m2 = 0, prev = 0;
    for (size_t i = 0; i < homa_workload_points(w); i++) {
        uint32_t b;
        double f;
        assert_int_equal(homa_workload_point(w, i, &b, &f), 0);
        double x = (max && b > max) ? max : b;
        m2 += x * x * (f - prev);
        prev = f;
    }
    return sqrt(m2 - mean * mean);
}

static void homa_workload_sample__mean_matches_cdf(void **state)
{
    (void)state;
    const int draws = 1000000;
    rng_state = 12345;
    for (int i = 0; i < 5; i++) {
        homa_workload *w = NULL;
        assert_int_equal(homa_workload_load(expected[i].name, HOMA_DATA_DIR, NULL, &w), 0);
        for (int t = 0; t < 2; t++) {
            uint32_t max = t ? HOMA_WORKLOAD_LINUX_MAX : HOMA_WORKLOAD_NO_MAX;
            uint32_t q10 = homa_workload_quantile(w, 0.10, max);
            double sum = 0;
            long short_count = 0;
            for (int k = 0; k < draws; k++) {
                uint32_t s = homa_workload_sample(w, rng_uniform(), max);
                assert_true(s >= homa_workload_min_size(w));
                if (max != HOMA_WORKLOAD_NO_MAX) assert_true(s <= max);
                sum += s;
                short_count += s <= q10;
            }
            double mean = homa_workload_mean(w, max);
            double got = sum / draws;
            double short_frac = (double)short_count / draws;
            /* The heavy tails of W2/W3 make the sample mean noisy (standard
             * error up to 2.3 % for 1e6 draws): allow 3 % or 4 standard
             * errors, whichever is larger. */
            double stderr_rel = workload_stddev(w, max) / sqrt((double)draws) / mean;
            double tol = fmax(0.03, 4 * stderr_rel);
            printf("%s%s: sampled mean %.1f B vs exact %.1f B (%+.2f %%, tolerance %.1f %%); "
                   "P(len <= %u) sampled %.4f vs cdf %.4f\n",
                   expected[i].name, t ? " (1 MB cap)" : "", got, mean, 100.0 * (got - mean) / mean,
                   100 * tol, q10, short_frac, homa_workload_cdf(w, q10));
            assert_true(close_rel(got, mean, tol));
            assert_true(fabs(short_frac - homa_workload_cdf(w, q10)) < 0.005);
        }
        homa_workload_free(w);
    }
}

static void homa_workload_sample__edges(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(load_text("# test\n10 0.25\n20 0.5\n30 1\n", &w), 0);
    assert_int_equal(homa_workload_sample(w, 0.0, 0), 10);
    assert_int_equal(homa_workload_sample(w, 0.2499, 0), 10);
    assert_int_equal(homa_workload_sample(w, 0.25, 0), 20);
    assert_int_equal(homa_workload_sample(w, 0.4999, 0), 20);
    assert_int_equal(homa_workload_sample(w, 0.5, 0), 30);
    assert_int_equal(homa_workload_sample(w, nextafter(1.0, 0.0), 0), 30);
    /* Out-of-range u is clamped. */
    assert_int_equal(homa_workload_sample(w, -1.0, 0), 10);
    assert_int_equal(homa_workload_sample(w, 1.0, 0), 30);
    assert_int_equal(homa_workload_sample(w, 7.0, 0), 30);
    assert_int_equal(homa_workload_sample(w, NAN, 0), 10);
    /* Truncation clamps. */
    assert_int_equal(homa_workload_sample(w, 0.9, 25), 25);
    assert_int_equal(homa_workload_sample(w, 0.1, 25), 10);
    homa_workload_free(w);
}

static void homa_workload_sample__zero_first_point_never_drawn(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(load_text("5 0\n10 0.5\n20 1\n", &w), 0);
    assert_int_equal(homa_workload_min_size(w), 10);
    assert_int_equal(homa_workload_sample(w, 0.0, 0), 10);
    assert_int_equal(homa_workload_quantile(w, 0.0, 0), 10);
    assert_true(homa_workload_cdf(w, 5) == 0.0);
    assert_true(fabs(homa_workload_mean(w, 0) - 15.0) < 1e-9);
    homa_workload_free(w);
}

static void homa_workload_mean__small_exact(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(load_text("10 0.25\n20 0.5\n30 1\n", &w), 0);
    /* 10*0.25 + 20*0.25 + 30*0.5 = 22.5 */
    assert_true(fabs(homa_workload_mean(w, 0) - 22.5) < 1e-9);
    /* capped at 15: 10*0.25 + 15*0.75 = 13.75 */
    assert_true(fabs(homa_workload_mean(w, 15) - 13.75) < 1e-9);
    /* a cap above the maximum changes nothing */
    assert_true(fabs(homa_workload_mean(w, 1000) - 22.5) < 1e-9);
    homa_workload_free(w);
}

static void homa_workload_quantile__basic(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(load_text("10 0.25\n20 0.5\n30 1\n", &w), 0);
    assert_int_equal(homa_workload_quantile(w, 0.0, 0), 10);
    assert_int_equal(homa_workload_quantile(w, 0.1, 0), 10);
    assert_int_equal(homa_workload_quantile(w, 0.25, 0), 10);
    assert_int_equal(homa_workload_quantile(w, 0.26, 0), 20);
    assert_int_equal(homa_workload_quantile(w, 0.5, 0), 20);
    assert_int_equal(homa_workload_quantile(w, 0.99, 0), 30);
    assert_int_equal(homa_workload_quantile(w, 1.0, 0), 30);
    assert_int_equal(homa_workload_quantile(w, 2.0, 0), 30);
    assert_int_equal(homa_workload_quantile(w, -1.0, 0), 10);
    assert_int_equal(homa_workload_quantile(w, 0.99, 25), 25);
    homa_workload_free(w);
}

static void homa_workload_quantile__shipped_shortest_ten_percent(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        homa_workload *w = NULL;
        assert_int_equal(homa_workload_load(expected[i].name, HOMA_DATA_DIR, NULL, &w), 0);
        uint32_t q = homa_workload_quantile(w, 0.10, 0);
        assert_true(homa_workload_cdf(w, q) >= 0.10);
        if (q > homa_workload_min_size(w)) assert_true(homa_workload_cdf(w, q - 1) < 0.10);
        homa_workload_free(w);
    }
}

static void homa_workload_cdf__basic(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(load_text("10 0.25\n20 0.5\n30 1\n", &w), 0);
    assert_true(homa_workload_cdf(w, 0) == 0.0);
    assert_true(homa_workload_cdf(w, 9) == 0.0);
    assert_true(homa_workload_cdf(w, 10) == 0.25);
    assert_true(homa_workload_cdf(w, 19) == 0.25);
    assert_true(homa_workload_cdf(w, 20) == 0.5);
    assert_true(homa_workload_cdf(w, 30) == 1.0);
    assert_true(homa_workload_cdf(w, UINT32_MAX) == 1.0);
    homa_workload_free(w);
}

static void homa_workload_load__by_name_in_data_dir(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    /* <dir>/workloads/<name>.cdf */
    assert_int_equal(homa_workload_load("w3", HOMA_DATA_DIR, NULL, &w), 0);
    assert_string_equal(homa_workload_name(w), "w3");
    homa_workload_free(w);
    /* <dir>/<name>.cdf, upper-case name and .cdf suffix accepted */
    assert_int_equal(homa_workload_load("W2", WORKLOAD_DIR, NULL, &w), 0);
    assert_string_equal(homa_workload_name(w), "w2");
    homa_workload_free(w);
    assert_int_equal(homa_workload_load("w5.cdf", NULL, WORKLOAD_DIR, &w), 0);
    assert_string_equal(homa_workload_name(w), "w5");
    homa_workload_free(w);
    /* A name with '/' is a path. */
    assert_int_equal(homa_workload_load(WORKLOAD_DIR "/w1.cdf", "/nonexistent", NULL, &w), 0);
    assert_string_equal(homa_workload_name(w), "w1");
    homa_workload_free(w);
}

static void homa_workload_load__search_order(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    unsetenv("HOMA_DATA_DIR");
    /* Missing caller dir falls through to the compiled-in default. */
    assert_int_equal(homa_workload_load("w4", "/nonexistent", HOMA_DATA_DIR, &w), 0);
    homa_workload_free(w);
    /* The environment is used when the caller gives no directory. */
    setenv("HOMA_DATA_DIR", HOMA_DATA_DIR, 1);
    assert_int_equal(homa_workload_load("w4", NULL, "/nonexistent", &w), 0);
    assert_int_equal(homa_workload_points(w), 460);
    homa_workload_free(w);
    unsetenv("HOMA_DATA_DIR");
    assert_int_equal(homa_workload_load("w4", NULL, "/nonexistent", &w), HOMA_ERR_NOT_FOUND);
    assert_null(w);
    printf("not found: %s\n", homa_workload_errmsg());
    assert_non_null(strstr(homa_workload_errmsg(), "/nonexistent/workloads/w4.cdf"));
    assert_int_equal(homa_workload_load("w4", NULL, NULL, &w), HOMA_ERR_NOT_FOUND);
    assert_non_null(strstr(homa_workload_errmsg(), "HOMA_DATA_DIR"));
}

static void homa_workload_load__bad_arguments(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(homa_workload_load("w9", HOMA_DATA_DIR, NULL, &w), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_workload_load("", HOMA_DATA_DIR, NULL, &w), HOMA_ERR_INVAL);
    assert_int_equal(homa_workload_load(NULL, HOMA_DATA_DIR, NULL, &w), HOMA_ERR_INVAL);
    assert_int_equal(homa_workload_load("..", HOMA_DATA_DIR, NULL, &w), HOMA_ERR_INVAL);
    assert_int_equal(homa_workload_load("w 1", HOMA_DATA_DIR, NULL, &w), HOMA_ERR_INVAL);
    assert_int_equal(homa_workload_load("w1", HOMA_DATA_DIR, NULL, NULL), HOMA_ERR_INVAL);
    assert_int_equal(homa_workload_load_file("/nonexistent/x.cdf", &w), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_workload_load_file("", &w), HOMA_ERR_INVAL);
    assert_int_equal(homa_workload_load_file(HOMA_DATA_DIR, &w), HOMA_ERR_IO);
    printf("directory: %s\n", homa_workload_errmsg());
    assert_null(w);
    homa_workload_free(NULL);
}

static void homa_workload_load_file__accepts_comments_blanks_crlf(void **state)
{
    (void)state;
    homa_workload *w = NULL;
    assert_int_equal(load_text("# header\r\n\r\n  # indented comment\n"
                               "\t100   0.5 \r\n\n"
                               "200 0.9999995", /* no final newline; within 1e-6 of 1 */
                               &w),
                     0);
    assert_int_equal(homa_workload_points(w), 2);
    double f;
    assert_int_equal(homa_workload_point(w, 1, NULL, &f), 0);
    assert_true(f == 1.0); /* normalised */
    assert_int_equal(homa_workload_sample(w, 0.9999999, 0), 200);
    homa_workload_free(w);
    /* A single point is a constant size. */
    assert_int_equal(load_text("1000 1\n", &w), 0);
    assert_true(homa_workload_mean(w, 0) == 1000.0);
    assert_int_equal(homa_workload_sample(w, 0.3, 0), 1000);
    homa_workload_free(w);
}

static void homa_workload_load_file__rejects_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *why; /* substring of the error message */
    } cases[] = {
        {"", "empty"},
        {"# only a comment\n\n", "empty"},
        {"abc 0.5\n100 1\n", ":1:"},
        {"100\n", "missing"},
        {"100 \n", "missing"},
        {"100 0.5 7\n200 1\n", "unexpected text"},
        {"100 0.5x\n200 1\n", "unexpected text"},
        {"12abc 0.5\n200 1\n", "integer"},
        {"-5 0.5\n200 1\n", "non-negative"},
        {"0 0.5\n200 1\n", "at least 1"},
        {"1.5 0.5\n200 1\n", "integer"},
        {"99999999999 1\n", "2^31"},
        {"100 abc\n200 1\n", "not a number"},
        {"100 nan\n200 1\n", "not a number"},
        {"100 inf\n200 1\n", "not a number"},
        {"100 1e999\n", "not a number"},
        {"100 -0.1\n200 1\n", "outside"},
        {"100 1.5\n", "outside"},
        {"100 0.5\n100 1\n", "length 100 not greater"},
        {"200 0.5\n100 1\n", "length 100 not greater"},
        {"100 0.5\n200 0.5\n300 1\n", "fraction 0.5 not greater"},
        {"100 0.6\n200 0.5\n300 1\n", "not greater"},
        {"100 0.5\n200 0.99\n", "not 1"},
        {"100 0.5\n200 0.999998\n", "not 1"},
        {"# c\n100 0.5\n# c\n200 1\n# trailing\n300\n", ":6:"},
        {"100 0.5\n200 1\n300 1\n", "not greater"},
        {"100 0.5 # comment\n200 1\n", "unexpected text"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        homa_workload *w = (homa_workload *)&w; /* must be reset to NULL */
        int err = load_text(cases[i].text, &w);
        printf("case %zu: %d %s\n", i, err, homa_workload_errmsg());
        assert_int_equal(err, HOMA_ERR_INVAL);
        assert_null(w);
        assert_non_null(strstr(homa_workload_errmsg(), cases[i].why));
    }
    /* NUL byte inside a data line. */
    const char bin[] = "100 0.5\n200\0 1\n";
    const char *path = write_temp("");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bin, 1, sizeof(bin) - 1, f), sizeof(bin) - 1);
    fclose(f);
    homa_workload *w = NULL;
    assert_int_equal(homa_workload_load_file(path, &w), HOMA_ERR_INVAL);
    assert_non_null(strstr(homa_workload_errmsg(), "NUL"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_workload_load_file__all_shipped),
        cmocka_unit_test(homa_workload_mean__matches_protocol_figures),
        cmocka_unit_test(homa_workload_mean__small_exact),
        cmocka_unit_test(homa_workload_sample__mean_matches_cdf),
        cmocka_unit_test(homa_workload_sample__edges),
        cmocka_unit_test(homa_workload_sample__zero_first_point_never_drawn),
        cmocka_unit_test(homa_workload_quantile__basic),
        cmocka_unit_test(homa_workload_quantile__shipped_shortest_ten_percent),
        cmocka_unit_test(homa_workload_cdf__basic),
        cmocka_unit_test(homa_workload_load__by_name_in_data_dir),
        cmocka_unit_test(homa_workload_load__search_order),
        cmocka_unit_test(homa_workload_load__bad_arguments),
        cmocka_unit_test(homa_workload_load_file__accepts_comments_blanks_crlf),
        cmocka_unit_test(homa_workload_load_file__rejects_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
