/* plotcall: runs homa-plot for the tools' --plot options (plotcall.h). */
#include "plotcall.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* homa-plot's exit status when matplotlib cannot be imported. */
#define PLOT_EXIT_NO_MATPLOTLIB 3

static int runnable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int copy_path(char *buf, size_t len, const char *s)
{
    if (strlen(s) >= len) return -1;
    memcpy(buf, s, strlen(s) + 1);
    return 0;
}

/* homa-plot in the directory of the running executable: the build tree has a
 * copy next to the tools, and an installation puts both in one bin/. */
static int next_to_exe(char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    if ((size_t)snprintf(buf, len, "%s/homa-plot", exe) >= len) return -1;
    return runnable(buf) ? 0 : -1;
}

static int on_path(char *buf, size_t len)
{
    const char *p = getenv("PATH");
    if (!p || !*p) return -1;
    while (*p) {
        size_t n = strcspn(p, ":");
        /* an empty PATH entry means the current directory */
        int w =
            n ? snprintf(buf, len, "%.*s/homa-plot", (int)n, p) : snprintf(buf, len, "./homa-plot");
        if (w > 0 && (size_t)w < len && runnable(buf)) return 0;
        p += n;
        if (*p == ':') p++;
    }
    return -1;
}

int plotcall_find(char *buf, size_t len, char *err, size_t errlen)
{
    const char *env = getenv("HOMA_PLOT");
    if (env && *env) {
        if (!runnable(env)) {
            snprintf(err, errlen, "HOMA_PLOT=%s is not an executable file", env);
            return -1;
        }
        if (copy_path(buf, len, env) != 0) {
            snprintf(err, errlen, "HOMA_PLOT is too long");
            return -1;
        }
        return 0;
    }
    if (next_to_exe(buf, len) == 0) return 0;
#ifdef HOMA_PLOT_SOURCE
    if (runnable(HOMA_PLOT_SOURCE) && copy_path(buf, len, HOMA_PLOT_SOURCE) == 0) return 0;
#endif
    if (on_path(buf, len) == 0) return 0;
    snprintf(err, errlen,
             "homa-plot not found (not next to this program, not in the source tree, not on "
             "PATH); install it or set HOMA_PLOT to its path");
    return -1;
}

static void add(const char **argv, int *n, const char *a, const char *b)
{
    argv[(*n)++] = a;
    if (b) argv[(*n)++] = b;
}

/* "--opt=value" in one argument, so that a value starting with '-' (a
 * label such as "-1") is not taken for an option.  NULL when out of memory. */
static char *joined(const char *opt, const char *value)
{
    size_t n = strlen(opt) + strlen(value) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s=%s", opt, value);
    return s;
}

int plotcall_run(const struct plotcall_args *a, char *err, size_t errlen)
{
    if (!a || !a->json || !a->out || a->nlabels < 0 || (a->nlabels > 0 && !a->labels)) {
        snprintf(err, errlen, "plot: bad arguments");
        return -1;
    }
    char path[4096];
    if (plotcall_find(path, sizeof(path), err, errlen) != 0) return -1;
    size_t nown = (size_t)a->nlabels + 5;
    const char **argv = calloc(nown + 8, sizeof(*argv));
    char **own = calloc(nown, sizeof(*own));
    int n = 0, no = 0, oom = !argv || !own;
    if (!oom) {
        add(argv, &n, path, NULL);
        add(argv, &n, "--quiet", NULL);
        own[no++] = joined("--output", a->out);
        if (a->kind) own[no++] = joined("--kind", a->kind);
        if (a->figure) own[no++] = joined("--figure", a->figure);
        if (a->title) own[no++] = joined("--title", a->title);
        for (int i = 0; i < a->nlabels; i++)
            own[no++] = joined("--label", a->labels[i] ? a->labels[i] : "");
        for (int i = 0; i < no; i++) {
            if (!own[i]) oom = 1;
            argv[n++] = own[i];
        }
        /* "--": a JSON path starting with '-' is not an option either */
        add(argv, &n, "--", a->json);
        argv[n] = NULL;
    }
    if (oom) {
        for (int i = 0; own && i < no; i++)
            free(own[i]);
        free(own);
        free(argv);
        snprintf(err, errlen, "plot: out of memory");
        return -1;
    }

    /* The tools ignore SIGPIPE (and cluster SIGINT at times): the plotter
     * starts with the default dispositions. */
    posix_spawnattr_t attr;
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    int have_attr = posix_spawnattr_init(&attr) == 0;
    if (have_attr) {
        posix_spawnattr_setsigdefault(&attr, &def);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    int rc = posix_spawn(&pid, path, NULL, have_attr ? &attr : NULL, (char *const *)argv, environ);
    if (have_attr) posix_spawnattr_destroy(&attr);
    for (int i = 0; i < no; i++)
        free(own[i]);
    free(own);
    free(argv);
    if (rc == ENOENT) {
        /* ENOENT for an existing script: its interpreter is missing */
        snprintf(err, errlen,
                 "cannot run %s: %s (homa-plot needs /usr/bin/python3 with matplotlib; "
                 "Debian: apt-get install python3-matplotlib), no plot drawn",
                 path, strerror(rc));
        return PLOTCALL_SKIPPED;
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot run %s: %s", path, strerror(rc));
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "waiting for %s: %s", path, strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) == PLOT_EXIT_NO_MATPLOTLIB) {
        snprintf(err, errlen,
                 "%s: matplotlib is missing, no plot drawn (Debian: apt-get install "
                 "python3-matplotlib)",
                 path);
        return PLOTCALL_SKIPPED;
    }
    if (WIFEXITED(st))
        snprintf(err, errlen, "%s failed (exit status %d), no plot drawn", path, WEXITSTATUS(st));
    else
        snprintf(err, errlen, "%s was killed by signal %d, no plot drawn", path,
                 WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return -1;
}

FILE *plotcall_tmpjson(char *buf, size_t len)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    int w = snprintf(buf, len, "%s/homa-plot-XXXXXX.json", dir);
    if (w < 0 || (size_t)w >= len) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    int fd = mkstemps(buf, 5);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(buf);
        errno = e;
    }
    return f;
}
