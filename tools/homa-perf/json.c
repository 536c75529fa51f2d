/* homa-perf: a minimal streaming JSON writer (see json.h). */
#include "json.h"

#include <math.h>

void json_init(json_writer *j, FILE *out)
{
    j->out = out;
    j->depth = 0;
    j->need_comma[0] = 0;
}

static void put_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

static void prefix(json_writer *j, const char *key)
{
    if (j->need_comma[j->depth]) fputc(',', j->out);
    j->need_comma[j->depth] = 1;
    if (key) {
        put_string(j->out, key);
        fputc(':', j->out);
    }
}

static void json_open(json_writer *j, const char *key, char c)
{
    prefix(j, key);
    fputc(c, j->out);
    if (j->depth + 1 < JSON_MAX_DEPTH) j->depth++;
    j->need_comma[j->depth] = 0;
}

static void close_(json_writer *j, char c)
{
    fputc(c, j->out);
    if (j->depth > 0) j->depth--;
}

void json_obj_begin(json_writer *j, const char *key)
{
    json_open(j, key, '{');
}

void json_obj_end(json_writer *j)
{
    close_(j, '}');
}

void json_arr_begin(json_writer *j, const char *key)
{
    json_open(j, key, '[');
}

void json_arr_end(json_writer *j)
{
    close_(j, ']');
}

void json_str(json_writer *j, const char *key, const char *value)
{
    prefix(j, key);
    if (value)
        put_string(j->out, value);
    else
        fputs("null", j->out);
}

void json_u64(json_writer *j, const char *key, uint64_t value)
{
    prefix(j, key);
    fprintf(j->out, "%llu", (unsigned long long)value);
}

void json_i64(json_writer *j, const char *key, int64_t value)
{
    prefix(j, key);
    fprintf(j->out, "%lld", (long long)value);
}

void json_num(json_writer *j, const char *key, double value)
{
    prefix(j, key);
    if (isfinite(value))
        fprintf(j->out, "%.9g", value);
    else
        fputs("null", j->out);
}

void json_bool(json_writer *j, const char *key, int value)
{
    prefix(j, key);
    fputs(value ? "true" : "false", j->out);
}

void json_null(json_writer *j, const char *key)
{
    prefix(j, key);
    fputs("null", j->out);
}
