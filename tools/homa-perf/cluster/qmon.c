/* homa-perf cluster: queue monitor.
 *
 * A thread samples, every few milliseconds, the backlog (packets) of every
 * priority queue of every switch port and of every host NIC queue, through
 * rtnetlink (RTM_GETQDISC dumps; the qdiscs are those scripts/homa-cluster
 * makes: pfifo leaves with handles 10: .. 17: under an htb root).  One
 * netlink socket is opened inside each namespace (a socket stays in the
 * namespace it was created in), so sampling needs no namespace switches.
 * The result says where packets waited: in which switch priority queues,
 * how long the queues got, and how much waited in the hosts' NICs. */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define QMON_MAX_NS (CLUSTER_MAX_HOSTS + 1)
#define QMON_MAX_BACKLOG 4096 /* histogram range, packets */

struct cluster_qmon {
    int nhosts;
    int fd[QMON_MAX_NS]; /* [0] switch, [1 + i] host i */
    int port_ifindex[CLUSTER_MAX_HOSTS];
    int nic_ifindex[CLUSTER_MAX_HOSTS];
    uint64_t interval_ns;
    pthread_t thread;
    atomic_int stop;
    int running;
    /* Results (written by the thread only while running). */
    uint64_t samples;
    uint64_t prio_hist[8][QMON_MAX_BACKLOG + 1]; /* backlog of one port's queue, per sample */
    uint64_t nic_hist[QMON_MAX_BACKLOG + 1];     /* backlog of one host NIC, per sample */
    uint32_t seq;
    uint8_t buf[65536];
};

static int open_in_ns(const char *ns)
{
    char path[128];
    snprintf(path, sizeof(path), "/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) return -1;
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0) {
        close(nsfd);
        return -1;
    }
    int fd = -1;
    if (setns(nsfd, CLONE_NEWNET) == 0) {
        fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (setns(self, CLONE_NEWNET) != 0) {
            /* Cannot get back: this thread is unusable for anything else. */
            if (fd >= 0) close(fd);
            fd = -2;
        }
    }
    close(nsfd);
    close(self);
    return fd;
}

/* The ifindex of `dev` in the namespace of netlink socket fd (RTM_GETLINK). */
static int ifindex_in(int fd, const char *dev, uint8_t *buf, size_t cap)
{
    struct {
        struct nlmsghdr nh;
        struct ifinfomsg ifi;
        char attrs[64];
    } req;
    memset(&req, 0, sizeof(req));
    size_t nlen = strlen(dev) + 1;
    struct rtattr *ra = (struct rtattr *)req.attrs;
    ra->rta_type = IFLA_IFNAME;
    ra->rta_len = (unsigned short)RTA_LENGTH(nlen);
    memcpy(RTA_DATA(ra), dev, nlen);
    req.nh.nlmsg_len = (uint32_t)(NLMSG_LENGTH(sizeof(req.ifi)) + RTA_ALIGN(ra->rta_len));
    req.nh.nlmsg_type = RTM_GETLINK;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.ifi.ifi_family = AF_UNSPEC;
    if (send(fd, &req, req.nh.nlmsg_len, 0) < 0) return -1;
    ssize_t n = recv(fd, buf, cap, 0);
    if (n <= 0) return -1;
    struct nlmsghdr *nh = (struct nlmsghdr *)buf;
    if (!NLMSG_OK(nh, (size_t)n) || nh->nlmsg_type != RTM_NEWLINK) return -1;
    return ((struct ifinfomsg *)NLMSG_DATA(nh))->ifi_index;
}

static void record(uint64_t *hist, uint32_t v)
{
    hist[v > QMON_MAX_BACKLOG ? QMON_MAX_BACKLOG : v]++;
}

/* One RTM_GETQDISC dump of namespace k; adds the pfifo backlogs. */
static void sample_ns(cluster_qmon *q, int k)
{
    int fd = q->fd[k];
    if (fd < 0) return;
    struct {
        struct nlmsghdr nh;
        struct tcmsg tc;
    } req;
    memset(&req, 0, sizeof(req));
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(req.tc));
    req.nh.nlmsg_type = RTM_GETQDISC;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.nh.nlmsg_seq = ++q->seq;
    req.tc.tcm_family = AF_UNSPEC;
    if (send(fd, &req, req.nh.nlmsg_len, 0) < 0) return;
    uint32_t nic_total[CLUSTER_MAX_HOSTS] = {0};
    int done = 0;
    while (!done) {
        ssize_t n = recv(fd, q->buf, sizeof(q->buf), 0);
        if (n <= 0) return;
        for (struct nlmsghdr *nh = (struct nlmsghdr *)q->buf; NLMSG_OK(nh, (size_t)n);
             nh = NLMSG_NEXT(nh, n)) {
            if (nh->nlmsg_type == NLMSG_DONE || nh->nlmsg_type == NLMSG_ERROR) {
                done = 1;
                break;
            }
            if (nh->nlmsg_type != RTM_NEWQDISC) continue;
            struct tcmsg *tc = NLMSG_DATA(nh);
            uint32_t major = tc->tcm_handle >> 16;
            if (major < 0x10 || major > 0x17) continue;
            int len = (int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(*tc)));
            uint32_t qlen = UINT32_MAX;
            for (struct rtattr *ra = (struct rtattr *)((char *)tc + NLMSG_ALIGN(sizeof(*tc)));
                 RTA_OK(ra, len); ra = RTA_NEXT(ra, len)) {
                if (ra->rta_type == TCA_STATS && RTA_PAYLOAD(ra) >= sizeof(struct tc_stats)) {
                    struct tc_stats st;
                    memcpy(&st, RTA_DATA(ra), sizeof(st));
                    qlen = st.qlen;
                }
            }
            if (qlen == UINT32_MAX) continue;
            if (k == 0) {
                for (int p = 0; p < q->nhosts; p++)
                    if (tc->tcm_ifindex == q->port_ifindex[p])
                        record(q->prio_hist[major - 0x10], qlen);
            } else if (tc->tcm_ifindex == q->nic_ifindex[k - 1]) {
                nic_total[k - 1] += qlen;
            }
        }
    }
    if (k > 0) record(q->nic_hist, nic_total[k - 1]);
}

static void *qmon_main(void *arg)
{
    cluster_qmon *q = arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    while (!atomic_load(&q->stop)) {
        for (int k = 0; k <= q->nhosts; k++)
            sample_ns(q, k);
        q->samples++;
        ts.tv_nsec += (long)q->interval_ns;
        while (ts.tv_nsec >= 1000000000) {
            ts.tv_nsec -= 1000000000;
            ts.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    return NULL;
}

void cluster_qmon_stop(cluster_qmon *q)
{
    if (!q) return;
    if (q->running) {
        atomic_store(&q->stop, 1);
        pthread_join(q->thread, NULL);
        q->running = 0;
    }
}

void cluster_qmon_free(cluster_qmon *q)
{
    if (!q) return;
    cluster_qmon_stop(q);
    for (int k = 0; k < QMON_MAX_NS; k++)
        if (q->fd[k] >= 0) close(q->fd[k]);
    free(q);
}

cluster_qmon *cluster_qmon_start(const char *cluster, int hosts, uint64_t interval_ns)
{
    cluster_qmon *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    for (int k = 0; k < QMON_MAX_NS; k++)
        q->fd[k] = -1;
    q->nhosts = hosts;
    q->interval_ns = interval_ns;
    char ns[64], dev[16];
    snprintf(ns, sizeof(ns), "%s-sw", cluster);
    q->fd[0] = open_in_ns(ns);
    int ok = q->fd[0] >= 0;
    for (int i = 0; ok && i < hosts; i++) {
        snprintf(dev, sizeof(dev), "p%d", i);
        q->port_ifindex[i] = ifindex_in(q->fd[0], dev, q->buf, sizeof(q->buf));
        snprintf(ns, sizeof(ns), "%s-h%d", cluster, i);
        q->fd[1 + i] = open_in_ns(ns);
        ok = q->fd[1 + i] >= 0 && q->port_ifindex[i] > 0;
        if (ok) q->nic_ifindex[i] = ifindex_in(q->fd[1 + i], "eth0", q->buf, sizeof(q->buf));
        ok = ok && q->nic_ifindex[i] > 0;
    }
    if (!ok || pthread_create(&q->thread, NULL, qmon_main, q) != 0) {
        cluster_qmon_free(q);
        return NULL;
    }
    q->running = 1;
    return q;
}

static void hist_stats(const uint64_t *h, double *mean, uint32_t *p99, uint32_t *max)
{
    uint64_t n = 0;
    double sum = 0;
    for (uint32_t v = 0; v <= QMON_MAX_BACKLOG; v++) {
        n += h[v];
        sum += (double)v * (double)h[v];
    }
    *mean = n ? sum / (double)n : 0;
    *p99 = *max = 0;
    uint64_t rank = n - n / 100, seen = 0; /* at least 99 % of the samples */
    int have_p99 = 0;
    for (uint32_t v = 0; v <= QMON_MAX_BACKLOG; v++) {
        if (!h[v]) continue;
        seen += h[v];
        if (!have_p99 && seen >= rank) {
            *p99 = v;
            have_p99 = 1;
        }
        *max = v;
    }
}

void cluster_qmon_result(const cluster_qmon *q, cluster_qstats *out)
{
    memset(out, 0, sizeof(*out));
    if (!q) return;
    out->samples = q->samples;
    out->interval_us = (double)q->interval_ns / 1000.0;
    for (int l = 0; l < 8; l++)
        hist_stats(q->prio_hist[l], &out->prio_mean[l], &out->prio_p99[l], &out->prio_max[l]);
    hist_stats(q->nic_hist, &out->nic_mean, &out->nic_p99, &out->nic_max);
}
