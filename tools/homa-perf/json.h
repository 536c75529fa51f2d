/* homa-perf: a minimal streaming JSON writer (one line, no whitespace). */
#ifndef HOMA_PERF_JSON_H
#define HOMA_PERF_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json_writer {
    FILE *out;
    int depth;
    int need_comma[JSON_MAX_DEPTH];
} json_writer;

void json_init(json_writer *j, FILE *out);
/* key may be NULL inside arrays and for the top-level value. */
void json_obj_begin(json_writer *j, const char *key);
void json_obj_end(json_writer *j);
void json_arr_begin(json_writer *j, const char *key);
void json_arr_end(json_writer *j);
void json_str(json_writer *j, const char *key, const char *value);
void json_u64(json_writer *j, const char *key, uint64_t value);
void json_i64(json_writer *j, const char *key, int64_t value);
/* Non-finite numbers are written as null. */
void json_num(json_writer *j, const char *key, double value);
void json_bool(json_writer *j, const char *key, int value);
void json_null(json_writer *j, const char *key);

#endif
