/* homa-perf cluster: the slowdown chart (PNG), drawn with tools/common/plot.
 *
 * The plot library is compiled into homa-perf from here, because the
 * homa-perf target (tools/CMakeLists.txt) builds the files of this
 * directory only.  If the build ever links the homa_plot library into
 * homa-perf as well, nothing breaks: the linker takes no member of a static
 * library whose symbols are already defined.  Do not also add plot.c to the
 * homa-perf sources. */
#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../common/plot.c"

int cluster_plot(const char *path, const char *title, const cluster_curve *curves, int ncurves,
                 char *err, size_t errlen)
{
    struct plot_series s[8];
    int n = 0;
    for (int i = 0; i < ncurves && n < 8; i++) {
        if (curves[i].n <= 0) continue;
        s[n].label = curves[i].label;
        /* Same colour for both curves of a protocol: even = Homa, odd = TCP. */
        s[n].rgb = (i % 2) == 0 ? 0x1f77b4 : 0xd62728;
        s[n].x = curves[i].x;
        s[n].y = curves[i].y;
        s[n].n = (size_t)curves[i].n;
        s[n].dashed = curves[i].dashed != 0;
        s[n].markers = true;
        n++;
    }
    struct plot_spec sp;
    memset(&sp, 0, sizeof(sp));
    sp.title = title;
    sp.x.label = "message length (bytes, upper end of size bucket)";
    sp.x.log = true;
    sp.y.label = "slowdown (RPC time / best case on the idle cluster)";
    sp.y.log = true;
    sp.series = s;
    sp.nseries = (size_t)n;
    if (plot_write_png(path, &sp) < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
