/* plotcall (tools/common/plotcall.c): finding homa-plot, the arguments it
 * gets, and every way running it can fail, with stand-in scripts; then the
 * real homa-plot on a fixture (skipped without matplotlib). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "plotcall.h"

static char dir[64];

/* A stand-in for homa-plot: a shell script with this body, made executable. */
static const char *script(const char *name, const char *body)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s", body);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
    return path;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_plotcall-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int run_fake(const char *body, char *err, size_t errlen)
{
    setenv("HOMA_PLOT", script("fake", body), 1);
    struct plotcall_args a = {.json = "in.json", .out = "out.png"};
    int rc = plotcall_run(&a, err, errlen);
    unsetenv("HOMA_PLOT");
    return rc;
}

static void plotcall_find__honours_homa_plot(void **state)
{
    (void)state;
    const char *fake = script("fake", "#!/bin/sh\nexit 0\n");
    setenv("HOMA_PLOT", fake, 1);
    char path[4096], err[256];
    assert_int_equal(plotcall_find(path, sizeof(path), err, sizeof(err)), 0);
    assert_string_equal(path, fake);
    unsetenv("HOMA_PLOT");
}

static void plotcall_find__refuses_homa_plot_not_executable(void **state)
{
    (void)state;
    char path[4096], err[256];
    setenv("HOMA_PLOT", "/nonexistent/homa-plot", 1);
    assert_int_equal(plotcall_find(path, sizeof(path), err, sizeof(err)), -1);
    assert_non_null(strstr(err, "HOMA_PLOT=/nonexistent/homa-plot"));
    setenv("HOMA_PLOT", dir, 1); /* a directory is not a program */
    assert_int_equal(plotcall_find(path, sizeof(path), err, sizeof(err)), -1);
    unsetenv("HOMA_PLOT");
}

static void plotcall_find__falls_back_to_the_source_tree(void **state)
{
    (void)state;
    /* no homa-plot next to this test's executable, none on PATH */
    unsetenv("HOMA_PLOT");
    char *old = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", dir, 1);
    char path[4096], err[256];
    assert_int_equal(plotcall_find(path, sizeof(path), err, sizeof(err)), 0);
    assert_string_equal(path, HOMA_PLOT_SCRIPT);
    if (old) setenv("PATH", old, 1);
    free(old);
}

static void plotcall_run__passes_the_arguments(void **state)
{
    (void)state;
    char body[256];
    snprintf(body, sizeof(body), "#!/bin/sh\nprintf '%%s\\n' \"$@\" > '%s/args'\n", dir);
    setenv("HOMA_PLOT", script("fake", body), 1);
    const char *labels[2] = {"-1", NULL};
    struct plotcall_args a = {.json = "-odd.json",
                              .out = "out dir/x.png",
                              .kind = "cluster",
                              .figure = "slowdown",
                              .title = "a \"title\"; $(no shell)",
                              .labels = labels,
                              .nlabels = 2};
    char err[256];
    assert_int_equal(plotcall_run(&a, err, sizeof(err)), 0);
    unsetenv("HOMA_PLOT");
    char path[128], got[1024];
    snprintf(path, sizeof(path), "%s/args", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(got, 1, sizeof(got) - 1, f);
    fclose(f);
    got[n] = '\0';
    assert_string_equal(got, "--quiet\n--output=out dir/x.png\n--kind=cluster\n--figure=slowdown\n"
                             "--title=a \"title\"; $(no shell)\n--label=-1\n--label=\n--\n"
                             "-odd.json\n");
}

static void plotcall_run__reports_missing_matplotlib(void **state)
{
    (void)state;
    char err[512];
    /* optional: skipped, not failed, and the message says how to get it */
    assert_int_equal(run_fake("#!/bin/sh\nexit 3\n", err, sizeof(err)), PLOTCALL_SKIPPED);
    assert_non_null(strstr(err, "matplotlib is missing"));
    assert_non_null(strstr(err, "apt-get install python3-matplotlib"));
}

static void plotcall_run__reports_a_failure(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(run_fake("#!/bin/sh\nexit 1\n", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "exit status 1"));
    assert_int_equal(run_fake("#!/bin/sh\nkill -9 $$\n", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "signal 9"));
}

static void plotcall_run__reports_a_missing_interpreter(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(run_fake("#!/nonexistent/python3\n", err, sizeof(err)), PLOTCALL_SKIPPED);
    assert_non_null(strstr(err, "cannot run"));
    assert_non_null(strstr(err, "apt-get install python3-matplotlib"));
}

/* The real homa-plot where `import matplotlib` fails: a package of that name
 * first on PYTHONPATH raises ImportError, as on a machine without
 * python3-matplotlib.  Skipped (not failed), nothing drawn, and the message
 * names the package to install. */
static void plotcall_run__real_homa_plot_without_matplotlib_is_skipped(void **state)
{
    (void)state;
    char shadow[128], pkg[160], init[192], out[128], err[600];
    snprintf(shadow, sizeof(shadow), "%s/shadow", dir);
    snprintf(pkg, sizeof(pkg), "%s/matplotlib", shadow);
    snprintf(init, sizeof(init), "%s/__init__.py", pkg);
    assert_int_equal(mkdir(shadow, 0755), 0);
    assert_int_equal(mkdir(pkg, 0755), 0);
    FILE *f = fopen(init, "w");
    assert_non_null(f);
    fprintf(f, "raise ImportError('matplotlib hidden by test_plotcall')\n");
    fclose(f);
    char *old = getenv("PYTHONPATH") ? strdup(getenv("PYTHONPATH")) : NULL;
    setenv("PYTHONPATH", shadow, 1);
    setenv("HOMA_PLOT", HOMA_PLOT_SCRIPT, 1);
    snprintf(out, sizeof(out), "%s/hidden.png", dir);
    struct plotcall_args a = {.json = HOMA_PLOT_FIXTURES "/cluster.json", .out = out};
    int rc = plotcall_run(&a, err, sizeof(err));
    unsetenv("HOMA_PLOT");
    if (old)
        setenv("PYTHONPATH", old, 1);
    else
        unsetenv("PYTHONPATH");
    free(old);
    assert_int_equal(rc, PLOTCALL_SKIPPED);
    assert_non_null(strstr(err, "python3-matplotlib"));
    assert_int_equal(access(out, F_OK), -1);
}

static void plotcall_run__refuses_bad_arguments(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(plotcall_run(NULL, err, sizeof(err)), -1);
    struct plotcall_args a = {.json = NULL, .out = "x.png"};
    assert_int_equal(plotcall_run(&a, err, sizeof(err)), -1);
    struct plotcall_args b = {.json = "x.json", .out = "x.png", .nlabels = 1};
    assert_int_equal(plotcall_run(&b, err, sizeof(err)), -1);
    struct plotcall_args c = {.json = "x.json", .out = "x.png", .nlabels = -1};
    assert_int_equal(plotcall_run(&c, err, sizeof(err)), -1);
}

static void plotcall_tmpjson__makes_a_fresh_file(void **state)
{
    (void)state;
    char a[4096], b[4096];
    FILE *fa = plotcall_tmpjson(a, sizeof(a));
    FILE *fb = plotcall_tmpjson(b, sizeof(b));
    assert_non_null(fa);
    assert_non_null(fb);
    assert_string_not_equal(a, b);
    assert_string_equal(a + strlen(a) - 5, ".json");
    assert_true(fputs("{}\n", fa) >= 0);
    assert_int_equal(fclose(fa), 0);
    assert_int_equal(fclose(fb), 0);
    assert_int_equal(unlink(a), 0);
    assert_int_equal(unlink(b), 0);
    char tiny[8];
    assert_null(plotcall_tmpjson(tiny, sizeof(tiny)));
    setenv("TMPDIR", "/nonexistent", 1);
    assert_null(plotcall_tmpjson(a, sizeof(a)));
    unsetenv("TMPDIR");
}

static int png_size(const char *path, uint32_t *w, uint32_t *h)
{
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(b, 1, sizeof(b), f);
    fclose(f);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 24 || memcmp(b, sig, 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0) return -1;
    *w = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
    *h = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
    return 0;
}

static void plotcall_run__real_homa_plot_draws_a_png(void **state)
{
    (void)state;
    unsetenv("HOMA_PLOT");
    char out[128], err[512];
    snprintf(out, sizeof(out), "%s/cluster.png", dir);
    struct plotcall_args a = {.json = HOMA_PLOT_FIXTURES "/cluster.json",
                              .out = out,
                              .kind = "cluster",
                              .figure = "slowdown",
                              .title = "test"};
    int rc = plotcall_run(&a, err, sizeof(err));
    if (rc == PLOTCALL_SKIPPED) {
        print_message("skipped: %s\n", err);
        skip();
    }
    if (rc != 0) fail_msg("%s", err);
    uint32_t w = 0, h = 0;
    assert_int_equal(png_size(out, &w, &h), 0);
    assert_true(w > 0 && h > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plotcall_find__honours_homa_plot),
        cmocka_unit_test(plotcall_find__refuses_homa_plot_not_executable),
        cmocka_unit_test(plotcall_find__falls_back_to_the_source_tree),
        cmocka_unit_test(plotcall_run__passes_the_arguments),
        cmocka_unit_test(plotcall_run__reports_missing_matplotlib),
        cmocka_unit_test(plotcall_run__reports_a_failure),
        cmocka_unit_test(plotcall_run__reports_a_missing_interpreter),
        cmocka_unit_test(plotcall_run__real_homa_plot_without_matplotlib_is_skipped),
        cmocka_unit_test(plotcall_run__refuses_bad_arguments),
        cmocka_unit_test(plotcall_tmpjson__makes_a_fresh_file),
        cmocka_unit_test(plotcall_run__real_homa_plot_draws_a_png),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
