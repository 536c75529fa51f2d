/* echo_server: answers every Homa request with the same bytes.
 *
 *   echo_server [PORT]        (default 4000; IPv4 and IPv6)
 *
 * Try it with echo_client, or with HOMA_PCAP=/tmp/echo.pcap to capture the
 * packets for tcpdump. */
#include <stdio.h>
#include <stdlib.h>

#include <homa/homa.h>

int main(int argc, char **argv)
{
    uint16_t port = (uint16_t)(argc > 1 ? atoi(argv[1]) : 4000);
    homa_socket *s;
    /* NULL: the process-wide default runtime (honours HOMA_FAULTS etc.). */
    int rc = homa_socket_open(NULL, port, &s);
    if (rc != 0) {
        fprintf(stderr, "echo_server: port %u: %s\n", port, homa_strerror(rc));
        return 1;
    }
    printf("echo_server: listening on port %u\n", homa_socket_port(s));
    fflush(stdout);
    for (;;) {
        homa_msg req;
        rc = homa_recv(s, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &req);
        if (rc != 0) {
            fprintf(stderr, "echo_server: recv: %s\n", homa_strerror(rc));
            continue;
        }
        /* The request bytes live in the engine until released: reply
         * straight from them (the reply is copied), then release. */
        rc = homa_reply_msg(s, &req, req.data, req.length);
        if (rc != 0) fprintf(stderr, "echo_server: reply: %s\n", homa_strerror(rc));
        homa_release(s, &req);
    }
}
