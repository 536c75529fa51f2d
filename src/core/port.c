/* Local ports: a port is opened by the application (a socket), owns the
 * RPCs started on it or addressed to it, and queues the messages ready
 * for homa_engine_recv (engine.c).  Found by number in a table of 64
 * buckets that never grows (max_ports bounds it). */
#include <stdlib.h>

#include "internal.h"

int homa_port_table_init(struct homa_engine *eng)
{
    return homa_htab_init(&eng->ports, 64);
}

void homa_port_table_destroy(struct homa_engine *eng)
{
    for (size_t i = 0; i < eng->ports.nb; i++) {
        while (eng->ports.b[i]) {
            struct homa_port *p = HOMA_CONTAINER(eng->ports.b[i], struct homa_port, hnode);
            eng->ports.b[i] = p->hnode.next;
            free(p);
        }
    }
    homa_htab_destroy(&eng->ports);
}

struct homa_port *homa_port_find(struct homa_engine *eng, uint16_t num)
{
    for (struct homa_hnode *n = homa_htab_first(&eng->ports, num); n; n = n->next) {
        struct homa_port *p = HOMA_CONTAINER(n, struct homa_port, hnode);
        if (p->num == num) return p;
    }
    return NULL;
}

int homa_engine_port_open(homa_engine *eng, uint16_t num)
{
    if (!eng || num == 0) return HOMA_ERR_INVAL;
    if (homa_port_find(eng, num)) return HOMA_ERR_PORT_IN_USE;
    if (eng->ports.n >= eng->cfg.max_ports) return HOMA_ERR_LIMIT;
    struct homa_port *p = calloc(1, sizeof(*p));
    if (!p) return HOMA_ERR_NOMEM;
    p->num = num;
    homa_readyq_init(&p->ready);
    homa_htab_add(&eng->ports, &p->hnode, num);
    return 0;
}

int homa_engine_port_rpcs(const homa_engine *eng, uint16_t num)
{
    if (!eng) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find((struct homa_engine *)eng, num);
    if (!port) return HOMA_ERR_NO_PORT;
    return port->num_rpcs > INT32_MAX ? INT32_MAX : (int)port->num_rpcs;
}

int homa_engine_port_set_class(homa_engine *eng, uint16_t num, int sched_class)
{
    if (!eng || sched_class < 0 || sched_class >= HOMA_SCHED_CLASSES) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find(eng, num);
    if (!port) return HOMA_ERR_NO_PORT;
    port->sched_class = (uint8_t)sched_class;
    return 0;
}

int homa_engine_port_close(homa_engine *eng, uint64_t now, uint16_t num)
{
    if (!eng) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find(eng, num);
    if (!port) return HOMA_ERR_NO_PORT;
    eng->now = now;
    struct hlist *n = eng->rpcs.next;
    while (n != &eng->rpcs) {
        struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, all_node);
        n = n->next;
        if (r->port == port) homa_rpc_free(eng, r);
    }
    /* zombies of this port keep a dangling port pointer: clear it */
    for (struct hlist *z = eng->zombies.next; z != &eng->zombies; z = z->next)
        HOMA_CONTAINER(z, struct homa_rpc, all_node)->port = NULL;
    homa_htab_del(&eng->ports, &port->hnode, num);
    free(port);
    homa_notify_tx(eng);
    return 0;
}
