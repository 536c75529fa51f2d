/* The homad client (docs/homad.md): a connection to the host's homad and
 * the sockets that live there.  The runtime's homad backend (rt.h) is made
 * of these calls; homad --stats (daemon/stats.c) uses the connection
 * directly. */
#ifndef HOMA_RT_HOMAD_CLIENT_H
#define HOMA_RT_HOMAD_CLIENT_H

#include <homa/homa.h>

struct homa_dc;
struct homa_dcsock;

/* Connects to homad at `path`; *cfg gets the engine configuration.
 * Errors: HOMA_ERR_IO (no daemon there), HOMA_ERR_INVAL (not homad, or
 * another protocol version), HOMA_ERR_LIMIT/HOMA_ERR_PERM (refused). */
int homa_dc_connect(const char *path, uint64_t busy_poll_ns, struct homa_dc **out,
                    homa_config *cfg);
void homa_dc_destroy(struct homa_dc *dc);
int homa_dc_counters(struct homa_dc *dc, homa_counters *engine, homa_driver_counters *driver);
/* The host engine's cutoffs (homa_runtime_cutoffs). */
int homa_dc_cutoffs(struct homa_dc *dc, homa_cutoffs *out);
/* homad's per-process table (struct homad_proc_row[], homad --stats):
 * copies up to cap bytes into buf; returns the byte count or an error. */
long homa_dc_stats(struct homa_dc *dc, void *buf, size_t cap);

int homa_dc_open(struct homa_dc *dc, const homa_endpoint *local, struct homa_dcsock **out,
                 uint16_t *bound);
void homa_dc_close(struct homa_dcsock *s);
/* homa_socket_fd(): an eventfd homad writes when it delivers to s. */
int homa_dc_fd(struct homa_dcsock *s);
int homa_dc_linger(struct homa_dcsock *s, int64_t timeout_ns);
int homa_dc_set_class(struct homa_dcsock *s, int sched_class);
/* prio: -1, or a priority range lo | hi << 4 (homa_sendx). */
int homa_dc_send(struct homa_dcsock *s, const homa_endpoint *dst, const void *buf, size_t len,
                 uint64_t cookie, int prio, uint64_t *id);
/* peer NULL: the peer of the unanswered request `id`. */
int homa_dc_reply(struct homa_dcsock *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                  const void *buf, size_t len);
int homa_dc_recv(struct homa_dcsock *s, unsigned flags, uint64_t id, int64_t timeout_ns,
                 homa_msg *msg);
void homa_dc_release(struct homa_dcsock *s, homa_msg *msg);
void *homa_dc_msg_take(struct homa_dcsock *s, homa_msg *msg);
int homa_dc_abort(struct homa_dcsock *s, uint64_t id);

#endif
