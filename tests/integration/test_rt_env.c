/* A malformed HOMA_FAULTS is an error at start: socket creation on the
 * default runtime fails with HOMA_ERR_INVAL, and the parser's message is on
 * stderr once.  Its own executable: the default runtime is made once per
 * process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void homa_socket_open__malformed_homa_faults_fails(void **state)
{
    (void)state;
    char path[] = "/tmp/homa_rt_env_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, 2), 2);

    setenv("HOMA_FAULTS", "drop=0.1,burst=0.5", 1);
    homa_socket *s = NULL;
    int rc1 = homa_socket_open(NULL, 0, &s);
    int rc2 = homa_socket_open(NULL, 0, &s);
    unsetenv("HOMA_FAULTS");

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    unlink(path);
    assert_true(n > 0);
    buf[n] = '\0';
    print_message("stderr: %s", buf);
    assert_int_equal(rc1, HOMA_ERR_INVAL);
    assert_int_equal(rc2, HOMA_ERR_INVAL);
    /* Said once, naming the variable and the bad key. */
    assert_int_equal(count(buf, "HOMA_FAULTS"), 1);
    assert_non_null(strstr(buf, "burst"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_socket_open__malformed_homa_faults_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
