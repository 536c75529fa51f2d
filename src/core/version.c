/* homa_version(), homa_version_string(): the values are compiled into the
 * library, so a program sees the version of the libhoma it loaded, not of
 * the headers it was built with. */
#include <homa/version.h>

unsigned homa_version(void)
{
    return HOMA_VERSION_NUMBER;
}

const char *homa_version_string(void)
{
    return HOMA_VERSION_STRING;
}
