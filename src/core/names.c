/* Names that become paths, and paths that are printed for a shell to run. */
#define _POSIX_C_SOURCE 200809L
#include "fedhet/core.h"

#include <string.h>

int fh_check_plain_name(const char *name, const char *what)
{
    /* ".." or "." would put a run's files into (and let --force delete them from) the parent folder */
    if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/'))
        FH_FAIL(FH_ERR_USAGE, "%s = '%s': must be a plain name (one file or folder name: not empty, '.' or '..', and without '/')", what,
                name);
    return FH_OK;
}

const char *fh_shell_quote(const char *text, char *out, size_t size)
{
    static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=+,@%";
    if (size == 0) return out;
    if (*text && strspn(text, plain) == strlen(text)) {
        snprintf(out, size, "%s", text);
        return out;
    }
    /* '...' with each embedded ' written as '\'' */
    size_t used = 0;
    const size_t room = size - 1;
    if (used < room) out[used++] = '\'';
    for (const char *p = text; *p && used < room; p++) {
        if (*p == '\'') {
            if (used + 4 > room) break;
            memcpy(out + used, "'\\''", 4);
            used += 4;
        } else
            out[used++] = *p;
    }
    if (used < room) out[used++] = '\'';
    out[used] = '\0';
    return out;
}
