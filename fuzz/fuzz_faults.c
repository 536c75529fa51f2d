/* libFuzzer target for the HOMA_FAULTS parser and the fault decision.
 *
 * Input: a spec string, optionally followed by a NUL byte and packet bytes.
 * The spec goes to homa_faults_parse; an accepted spec must satisfy the
 * invariants the injector relies on (each abort()s so libFuzzer records the
 * input), and a refused one must leave a message.  The packet bytes then go
 * through the classifier and the decision, untrusted, at a few times. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/fault_class.h"
#include "io/io.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_faults: invariant failed at line %d: %s\n", __LINE__, #cond);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int prob(double p)
{
    return p >= 0.0 && p <= 1.0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    char *spec = malloc(slen + 1);
    if (spec == NULL) return 0;
    memcpy(spec, data, slen);
    spec[slen] = '\0';
    const uint8_t *pkt = nul ? nul + 1 : NULL;
    size_t plen = nul ? size - slen - 1 : 0;

    homa_faults f;
    memset(&f, 0xA5, sizeof(f)); /* must be left alone on error */
    homa_faults before = f;
    char err[200];
    err[0] = '\0';
    int rc = homa_faults_parse(spec, &f, err, sizeof(err));
    free(spec);
    CHECK(rc == 0 || rc == HOMA_ERR_INVAL);
    CHECK(memchr(err, '\0', sizeof(err)) != NULL);
    if (rc != 0) {
        CHECK(err[0] != '\0');
        CHECK(memcmp(&f, &before, sizeof(f)) == 0);
        return 0;
    }
    CHECK(err[0] == '\0');
    CHECK(prob(f.drop) && prob(f.dup) && prob(f.reorder) && prob(f.delay));
    CHECK(f.drop + f.dup + f.reorder + f.delay <= 1.0 + 1e-9);
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++)
        CHECK(prob(f.drop_class[c]));
    CHECK((f.drop_types & ~((1u << HOMA_FAULT_CLASS_COUNT) - 1)) == 0);
    CHECK(f.delay_us <= 10000000u && f.jitter_us <= f.delay_us);
    CHECK(f.reorder_depth <= 1000);
    CHECK((f.dirs & ~(HOMA_FAULT_TX | HOMA_FAULT_RX)) == 0);
    if (f.burst != 0) {
        double b, g;
        CHECK(f.burst >= 1.0 && homa_fault_ge_params(f.drop, f.burst, &b, &g) == 0);
        CHECK(prob(b) && prob(g));
    }
    CHECK(f.blackout_every_ns == 0 || f.blackout_every_ns > f.blackout_ns);
    CHECK((f.blackout_every_ns == 0 && f.blackout_start_ns == 0) || f.blackout_ns > 0);

    /* The decision on the packet bytes (no seed: draw from a fixed one). */
    if (f.seed == 0) f.seed = 1;
    homa_fault_state st;
    homa_fault_init(&st, &f, HOMA_FAULT_TX, 0, 1000);
    unsigned cls = homa_fault_classify(pkt, plen);
    CHECK((cls & ~((1u << HOMA_FAULT_CLASS_COUNT) - 1)) == 0);
    if (cls & (1u << HOMA_FAULT_CLASS_LAST_DATA)) CHECK(cls & (1u << HOMA_FAULT_CLASS_DATA));
    static const uint64_t times[] = {0, 999, 1000, 123456789, 86400000000000ull, UINT64_MAX};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        uint64_t hold = 0;
        uint32_t wait = 0;
        int act = homa_fault_decide(&st, times[i], pkt, plen, &hold, &wait);
        CHECK(act >= HOMA_FAULT_PASS && act <= HOMA_FAULT_DELAY);
        if (act == HOMA_FAULT_REORDER || act == HOMA_FAULT_DELAY) {
            CHECK(hold <= ((uint64_t)f.delay_us + f.jitter_us) * 1000u);
            CHECK(hold + (uint64_t)f.jitter_us * 1000u >= (uint64_t)f.delay_us * 1000u);
            CHECK(wait >= 1 && wait <= 1000);
        }
    }
    return 0;
}
