/* shared/status.c: names for sl_status values, for logs and error lines. */
#include "shared/status.h"

const char *sl_status_name(sl_status rc)
{
    switch (rc) {
    case SL_OK:           return "SL_OK";
    case SL_AGAIN:        return "SL_AGAIN";
    case SL_EINVAL:       return "SL_EINVAL";
    case SL_ENOMEM:       return "SL_ENOMEM";
    case SL_EIO:          return "SL_EIO";
    case SL_EFORMAT:      return "SL_EFORMAT";
    case SL_EUNSUPPORTED: return "SL_EUNSUPPORTED";
    case SL_ESTALE:       return "SL_ESTALE";
    case SL_ERANGE:       return "SL_ERANGE";
    case SL_ESTATE:       return "SL_ESTATE";
    case SL_EBACKEND:     return "SL_EBACKEND";
    }
    return rc > 0 ? "SL_AGAIN" : "SL_E?";
}
