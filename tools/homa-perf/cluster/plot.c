/* homa-perf cluster --plot: homa-plot (tools/plot, matplotlib) draws the
 * slowdown chart from the run's JSON (tools/common/plotcall). */
#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "plotcall.h"

int cluster_plot_tmpjson(char *buf, size_t len)
{
    FILE *f = plotcall_tmpjson(buf, len);
    if (!f) {
        buf[0] = '\0';
        return -1;
    }
    /* cluster_main reopens it by name to write the JSON */
    fclose(f);
    return 0;
}

int cluster_plot(const char *json_path, const char *out_path, const char *title, char *err,
                 size_t errlen)
{
    if (!json_path || access(json_path, R_OK) != 0) {
        snprintf(err, errlen, "no plot: the JSON %s was not written",
                 json_path ? json_path : "(none)");
        return -1;
    }
    struct plotcall_args a = {.json = json_path,
                              .out = out_path,
                              .kind = "cluster",
                              .figure = "slowdown",
                              .title = title};
    int rc = plotcall_run(&a, err, errlen);
    return rc == PLOTCALL_SKIPPED ? CLUSTER_PLOT_SKIPPED : rc;
}
