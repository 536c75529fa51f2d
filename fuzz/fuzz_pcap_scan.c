/* libFuzzer target: the interop pcap reader (tests/interop/pcap_scan.c). */
#include <stddef.h>
#include <stdint.h>

#include "pcap_scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hx_pcap_stats st;
    hx_pcap_scan(data, size, &st);
    return 0;
}
