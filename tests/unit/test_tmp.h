/* Temporary files for tests: a fresh mkdtemp directory; everything created in it is recorded and removed,
 * newest first, by tmp_cleanup(). Include after test.h; define _POSIX_C_SOURCE 200809L first. */
#ifndef FEDHET_TEST_TMP_H
#define FEDHET_TEST_TMP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char tmp_root[64];
static char tmp_created[512][640]; /* paths up to 600 bytes */
static int tmp_n_created;

/* creates /tmp/fedhet_<tag>_XXXXXX; 0 on success */
static inline int tmp_init(const char *tag)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/fedhet_%s_XXXXXX", tag);
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        tmp_root[0] = '\0';
        return -1;
    }
    return 0;
}

static inline void tmp_record(const char *path)
{
    for (int i = 0; i < tmp_n_created; i++)
        if (strcmp(tmp_created[i], path) == 0) return;
    if (tmp_n_created < 512) snprintf(tmp_created[tmp_n_created++], sizeof tmp_created[0], "%s", path);
}

static inline void tmp_cleanup(void)
{
    for (int i = tmp_n_created - 1; i >= 0; i--) remove(tmp_created[i]);
    tmp_n_created = 0;
    if (tmp_root[0]) remove(tmp_root);
}

/* path of `name` inside the temp root (a rotation of buffers keeps a few alive at once) */
static inline const char *tmp_path(const char *name)
{
    static char bufs[8][600];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tmp_root, name);
    return b;
}

/* a sub-directory, recorded for removal */
static inline const char *tmp_dir(const char *name)
{
    const char *p = tmp_path(name);
    if (mkdir(p, 0700) != 0) printf("    cannot mkdir %s\n", p);
    tmp_record(p);
    return p;
}

#endif
