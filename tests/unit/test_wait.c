/* Unit tests for src/rt/wait.c, the runtime's one wait loop, with fake
 * backends: what it polls, when it spins, sleeps, gives up, and what the
 * adaptive spin budget learns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <homa/errors.h>

#include "rt/wait.h"

struct fake {
    int polls, sleeps, afters, spins;
    int spins_after_sleep; /* spins after the first sleep */
    int done_after_polls;  /* done once this many polls ran (0: never) */
    int found_until_polls; /* polls before this one find something */
    int done_after_sleeps; /* done once this many sleeps ran (0: never) */
    int error;
    char log[64];
    int nlog;
};

static void note(struct fake *f, char c)
{
    if (f->nlog < (int)sizeof(f->log) - 1) f->log[f->nlog++] = c;
}

static int f_poll(void *ctx)
{
    struct fake *f = ctx;
    f->polls++;
    note(f, 'p');
    return f->polls < f->found_until_polls ? 1 : 0;
}

static void f_after(void *ctx, uint64_t now)
{
    (void)now;
    ((struct fake *)ctx)->afters++;
}

static bool f_done(void *ctx)
{
    struct fake *f = ctx;
    return (f->done_after_polls && f->polls >= f->done_after_polls) ||
           (f->done_after_sleeps && f->sleeps >= f->done_after_sleeps);
}

static int f_error(void *ctx)
{
    return ((struct fake *)ctx)->error;
}

static void f_spin(void *ctx, uint64_t now)
{
    (void)now;
    struct fake *f = ctx;
    f->spins++;
    if (f->sleeps > 0) f->spins_after_sleep++;
}

/* Sleeps 100 us (or to `until`), as a wait for input that does not come. */
static void f_sleep(void *ctx, uint64_t until)
{
    struct fake *f = ctx;
    f->sleeps++;
    note(f, 's');
    uint64_t now = homa_rt_now(), d = 100000;
    if (until != UINT64_MAX && until > now && until - now < d) d = until - now;
    struct timespec ts = {0, (long)d};
    nanosleep(&ts, NULL);
}

static const struct homa_wait_ops fops = {.poll = f_poll,
                                          .after = f_after,
                                          .done = f_done,
                                          .error = f_error,
                                          .spin = f_spin,
                                          .sleep = f_sleep};

static void homa_wait_run__done_at_first_look_learns_nothing(void **state)
{
    (void)state;
    struct fake f = {.done_after_polls = 1};
    struct homa_spin sp;
    homa_spin_init(&sp, 1000);
    sp.ns = 500; /* halved once before */
    struct homa_wait w = {.ops = &fops, .ctx = &f, .spin = &sp};
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    assert_int_equal(f.polls, 1);
    assert_int_equal(f.sleeps, 0);
    assert_int_equal(f.afters, 0);
    assert_int_equal(sp.ns, 500); /* it never spun */
}

static void homa_wait_run__spin_that_ends_in_sleep_halves_budget(void **state)
{
    (void)state;
    struct fake f = {.done_after_sleeps = 1};
    struct homa_spin sp;
    homa_spin_init(&sp, 200000); /* 200 us */
    struct homa_wait w = {.ops = &fops, .ctx = &f, .spin = &sp};
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    assert_true(f.polls > 1); /* it spun, polling */
    assert_int_equal(f.spins, f.polls - 1);
    assert_int_equal(f.sleeps, 1);
    /* halved; or, if the test itself was preempted mid-spin (a loaded
     * machine), given up at once */
    assert_true(sp.ns == 100000 || sp.ns == 0);
    assert_int_equal(f.afters, f.polls);
}

static void homa_wait_run__found_while_spinning_restores_budget(void **state)
{
    (void)state;
    struct fake f = {.done_after_polls = 4, .found_until_polls = 3};
    struct homa_spin sp;
    homa_spin_init(&sp, 1000000);
    sp.ns = 300000;
    struct homa_wait w = {.ops = &fops, .ctx = &f, .spin = &sp, .flags = HOMA_WAIT_EXTEND};
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    assert_int_equal(f.polls, 4);
    assert_int_equal(f.sleeps, 0);
    assert_int_equal(sp.ns, 1000000);
}

static void homa_wait_run__deadline_and_error(void **state)
{
    (void)state;
    struct fake f = {0};
    struct homa_wait w = {.ops = &fops, .ctx = &f}; /* no spin budget at all */
    uint64_t t0 = homa_rt_now();
    assert_int_equal(homa_wait_run(&w, t0 + 2000000), HOMA_ERR_AGAIN);
    assert_true(homa_rt_now() >= t0 + 2000000);
    assert_true(f.sleeps >= 1);
    assert_int_equal(f.spins, 0);
    struct fake g = {.error = HOMA_ERR_SHUTDOWN};
    w.ctx = &g;
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), HOMA_ERR_SHUTDOWN);
    assert_int_equal(g.polls, 1);
    assert_int_equal(g.sleeps, 0);
}

static void homa_wait_run__sleep_first_without_budget(void **state)
{
    (void)state;
    struct fake f = {.done_after_polls = 1};
    struct homa_spin sp;
    homa_spin_init(&sp, 0);
    struct homa_wait w = {.ops = &fops, .ctx = &f, .spin = &sp, .flags = HOMA_WAIT_SLEEP_FIRST};
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    assert_string_equal(f.log, "sp"); /* slept, then polled */
    /* with a budget it polls first */
    struct fake g = {.done_after_polls = 1};
    homa_spin_init(&sp, 1000);
    w.ctx = &g;
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    assert_string_equal(g.log, "p");
}

static void homa_wait_run__respin_after_sleep(void **state)
{
    (void)state;
    struct homa_spin sp;
    /* Without RESPIN a wait spins only before its first sleep. */
    struct fake f = {.done_after_sleeps = 3};
    homa_spin_init(&sp, 50000000);
    sp.ns = 40000; /* a 40 us first spin, then 20 us */
    struct homa_wait w = {.ops = &fops, .ctx = &f, .spin = &sp};
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    assert_true(f.spins > 0);
    assert_int_equal(f.spins_after_sleep, 0);
    /* With it, every sleep is followed by a spin while the budget lasts. */
    struct fake g = {.done_after_sleeps = 3};
    sp.ns = 40000;
    w.ctx = &g;
    w.flags = HOMA_WAIT_RESPIN;
    assert_int_equal(homa_wait_run(&w, UINT64_MAX), 0);
    if (sp.ns > 0) assert_true(g.spins_after_sleep >= 1); /* 0: preempted mid-spin */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_wait_run__done_at_first_look_learns_nothing),
        cmocka_unit_test(homa_wait_run__spin_that_ends_in_sleep_halves_budget),
        cmocka_unit_test(homa_wait_run__found_while_spinning_restores_budget),
        cmocka_unit_test(homa_wait_run__deadline_and_error),
        cmocka_unit_test(homa_wait_run__sleep_first_without_budget),
        cmocka_unit_test(homa_wait_run__respin_after_sleep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
