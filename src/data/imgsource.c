/* Image sources (docs/data.md, Bring your own data): an image folder tree ROOT/CLASS/… (optionally
 * ROOT/{train,test}/CLASS/…), a domain tree ROOT/DOMAIN/CLASS/…, a label table (CSV) naming image files,
 * and NumPy .npy pairs or .npz archives. Opening one reads its metadata only (paths, labels, groups,
 * splits); images are decoded one at a time through the sets' fetch, in whatever order the writer asks. */
#include "imgsrc_internal.h"
#include "fedhet/buf.h"
#include "fedhet/core.h"
#include "fedhet/rng.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zip.h>

#define SRC_PATH_MAX 4096
#define SRC_MAX_SKIP_NAMES 5
/* Philox counter tag of the test_fraction split (purpose partition), apart from the partition's own draws */
#define SRC_SPLIT_TAG 0x5e1ec7u

typedef struct {
    char *path;    /* image file, or NULL for an array row */
    int64_t row;   /* array row (npy / npz) */
    int32_t label;
    int32_t group; /* -1: none */
    int32_t split; /* 0 train, 1 test, -1 undecided (test_fraction decides) */
    int32_t line;  /* CSV line, 0 otherwise */
    int64_t index; /* in the source's listing: the order entries were added, before splits and skips */
} SrcEntry;

/* An array of a .npy file or of an .npz member, read by rows: from the file, from a stored (uncompressed)
 * zip member, or from a temporary copy of a compressed member. */
typedef struct {
    char name[SRC_PATH_MAX];
    int fd;              /* plain file or temporary copy; -1 when zf serves */
    zip_file_t *zf;      /* stored member */
    int64_t data_offset; /* bytes before row 0 */
    char kind;           /* 'u' (uint8 images), 'f' (float32 images), 'i' (integer labels) */
    int elem;            /* bytes per element */
    int is_signed;
    int ndim;
    int64_t shape[4];
} SrcArray;

typedef struct {
    DataSource *src;
    const int64_t *rows; /* set row -> entry */
} SrcFetch;

/* Names in first-seen order with a hash index (open addressing): a lookup per table row stays O(1), where a linear
 * search made a table of 200,000 classes quadratic */
typedef struct {
    char **v;      /* [n] of [cap] */
    int n, cap;
    int32_t *slot; /* [mask + 1]: 1 + the index of the name there, 0 empty; NULL until the first name */
    uint32_t mask;
} Names;

struct DataSource {
    DataSourceOptions o;
    const char *format;
    SrcEntry *entries;
    int64_t n, cap;
    Names classes, groups; /* arrays: classes.n only (no names) */
    int64_t *rows[2]; /* entries of the training and test sets */
    SrcFetch fetch[2];
    int c, h, w;      /* output shape */
    int array_c, array_h, array_w, nchw; /* arrays: source image shape */
    SrcArray arrays[2]; /* images of the train and test parts */
    zip_t *zip;
    ImgBuf buf, scratch;
    ImgResizer resizer;
    uint8_t *file;
    size_t file_cap;
    int64_t skipped, ignored;
    char skip_names[1024];
};

/* ==== small helpers ================================================================================== */

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int has_image_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int join(char *out, const char *a, const char *b)
{
    if (snprintf(out, SRC_PATH_MAX, "%s/%s", a, b) >= SRC_PATH_MAX) FH_FAIL(FH_ERR_DATA, "%s/%s: path too long", a, b);
    return FH_OK;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Sorted names of a folder's entries (no dot files): sub-folders when want_dirs, else regular files. */
static int list_dir(const char *dir, int want_dirs, char ***names, int *n)
{
    *names = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d) FH_FAIL(FH_ERR_DATA, "%s: cannot open folder: %s", dir, strerror(errno));
    int cap = 0, status = FH_OK;
    struct dirent *e;
    char path[SRC_PATH_MAX];
    while (status == FH_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if ((status = join(path, dir, e->d_name)) != FH_OK) break;
        struct stat st;
        /* a link that leads back into itself is a broken tree, not an absent entry (its class would look empty) */
        const int found = stat(path, &st) == 0;
        if (!found && errno == ELOOP) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: symbolic link loop (it leads back to itself): "
                                    "remove or fix the link", path);
            break;
        }
        if (!found || (want_dirs ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) continue;
        status = fh_grow(names, &cap, *n + 1, sizeof **names, "a folder's entries");
        if (status == FH_OK && !((*names)[*n] = strdup(e->d_name)))
            status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory listing %s", dir);
        else if (status == FH_OK) (*n)++;
    }
    closedir(d);
    if (status == FH_OK && *n) qsort(*names, (size_t)*n, sizeof **names, str_cmp);
    return status;
}

static void free_names(char ***names, int n)
{
    for (int i = 0; i < n && *names; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
}

static void names_free(Names *t)
{
    free_names(&t->v, t->n);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

static uint32_t name_hash(const char *name) /* FNV-1a */
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
    return h;
}

/* the slot of name: where it is, or the empty one where it would go */
static uint32_t names_slot(const Names *t, const char *name)
{
    uint32_t i = name_hash(name) & t->mask;
    while (t->slot[i] && strcmp(t->v[t->slot[i] - 1], name)) i = (i + 1) & t->mask;
    return i;
}

static int names_find(const Names *t, const char *name)
{
    return t->slot ? t->slot[names_slot(t, name)] - 1 : -1;
}

/* the index over v[0..n) again, with room for twice as many names */
static int names_reindex(Names *t)
{
    uint32_t size = 64;
    while (size < 4u * (uint32_t)t->n) size *= 2;
    int32_t *slot = calloc(size, sizeof *slot);
    if (!slot) FH_FAIL(FH_ERR_MEMORY, "out of memory indexing %d names", t->n);
    free(t->slot);
    t->slot = slot;
    t->mask = size - 1;
    for (int i = 0; i < t->n; i++) t->slot[names_slot(t, t->v[i])] = i + 1;
    return FH_OK;
}

/* name's index in t, appended when absent */
static int names_add(Names *t, const char *name, int *index)
{
    *index = names_find(t, name);
    if (*index >= 0) return FH_OK;
    FH_CHECK(fh_grow(&t->v, &t->cap, t->n + 1, sizeof *t->v, "the names"));
    if (!t->slot || 2u * (uint32_t)(t->n + 1) > t->mask) FH_CHECK(names_reindex(t));
    if (!(t->v[t->n] = strdup(name))) FH_FAIL(FH_ERR_MEMORY, "out of memory for the name '%s'", name);
    *index = t->n++;
    t->slot[names_slot(t, name)] = *index + 1;
    return FH_OK;
}

typedef struct {
    char *name;
    int32_t index;
} NameAt;

static int name_at_cmp(const void *a, const void *b) { return strcmp(((const NameAt *)a)->name, ((const NameAt *)b)->name); }

/* t in name order; *map (t->n, the caller's to free) takes each former index to its new one */
static int names_sort(Names *t, int32_t **map)
{
    NameAt *at = malloc((size_t)(t->n ? t->n : 1) * sizeof *at);
    *map = malloc((size_t)(t->n ? t->n : 1) * sizeof **map);
    if (!at || !*map) {
        free(at);
        free(*map);
        *map = NULL;
        FH_FAIL(FH_ERR_MEMORY, "out of memory sorting %d names", t->n);
    }
    for (int i = 0; i < t->n; i++) at[i] = (NameAt){ t->v[i], i };
    qsort(at, (size_t)t->n, sizeof *at, name_at_cmp);
    for (int i = 0; i < t->n; i++) t->v[i] = at[i].name, (*map)[at[i].index] = i;
    free(at);
    return t->n ? names_reindex(t) : FH_OK;
}

static int add_entry(DataSource *s, const char *path, int64_t row, int label, int group, int split, int line)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1024;
        SrcEntry *grown = realloc(s->entries, (size_t)cap * sizeof *grown);
        if (!grown) FH_FAIL(FH_ERR_MEMORY, "out of memory for %lld image entries", (long long)cap);
        s->entries = grown;
        s->cap = cap;
    }
    SrcEntry *e = &s->entries[s->n];
    *e = (SrcEntry){ NULL, row, label, group, split, line, s->n };
    if (path && !(e->path = strdup(path))) FH_FAIL(FH_ERR_MEMORY, "out of memory for the path %s", path);
    s->n++;
    return FH_OK;
}

/* ==== folder trees ==================================================================================== */

/* The image files of dir (one class of one domain / split) as entries. */
static int scan_class(DataSource *s, const char *dir, int label, int group, int split)
{
    char **files;
    int n, status = FH_OK;
    FH_CHECK(list_dir(dir, 0, &files, &n));
    int64_t before = s->n;
    char path[SRC_PATH_MAX];
    for (int i = 0; i < n && status == FH_OK; i++) {
        if (!has_image_ext(files[i])) {
            s->ignored++;
            continue;
        }
        status = join(path, dir, files[i]);
        if (status == FH_OK) status = add_entry(s, path, 0, label, group, split, 0);
    }
    free_names(&files, n);
    FH_CHECK(status);
    if (s->n == before)
        FH_FAIL(FH_ERR_DATA, "%s: empty class folder (no .jpg, .jpeg or .png file): remove it or add its images", dir);
    return status;
}

/* ROOT/CLASS/… (split given) under dir; class names from s->classes (the training tree's) */
static int scan_classes(DataSource *s, const char *dir, int group, int split, int define_classes)
{
    char **names;
    int n;
    FH_CHECK(list_dir(dir, 1, &names, &n));
    int status = FH_OK;
    if (n == 0) status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: no class folders", dir);
    char path[SRC_PATH_MAX];
    for (int i = 0; i < n && status == FH_OK; i++) {
        int label = names_find(&s->classes, names[i]);
        if (label < 0 && define_classes) status = names_add(&s->classes, names[i], &label);
        else if (label < 0)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s/%s: class '%s' is not among the training "
                                    "classes", dir, names[i], names[i]);
        if (status == FH_OK) status = join(path, dir, names[i]);
        if (status == FH_OK) status = scan_class(s, path, label, group, split);
    }
    free_names(&names, n);
    return status;
}

static int open_imagefolder(DataSource *s, const char *root)
{
    char train[SRC_PATH_MAX], test[SRC_PATH_MAX];
    FH_CHECK(join(train, root, "train"));
    FH_CHECK(join(test, root, "test"));
    if (is_dir(train)) {
        FH_CHECK(scan_classes(s, train, -1, 0, 1));
        if (is_dir(test)) FH_CHECK(scan_classes(s, test, -1, 1, 0));
        return FH_OK;
    }
    return scan_classes(s, root, -1, -1, 1);
}

/* ROOT/DOMAIN/CLASS/…: classes are the union over the domains, in name order */
static int open_domains(DataSource *s, const char *root)
{
    char **domains;
    int n;
    FH_CHECK(list_dir(root, 1, &domains, &n));
    int status = n ? FH_OK : fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: no domain folders", root);
    char path[SRC_PATH_MAX];
    for (int d = 0; d < n && status == FH_OK; d++) {
        char **classes = NULL;
        int n_classes = 0, label;
        status = join(path, root, domains[d]);
        if (status == FH_OK) status = list_dir(path, 1, &classes, &n_classes);
        for (int i = 0; i < n_classes && status == FH_OK; i++) status = names_add(&s->classes, classes[i], &label);
        if (classes) free_names(&classes, n_classes);
    }
    int32_t *map = NULL;
    if (status == FH_OK) status = names_sort(&s->classes, &map); /* no entries yet to renumber */
    free(map);
    for (int d = 0; d < n && status == FH_OK; d++) {
        int group;
        status = names_add(&s->groups, domains[d], &group);
        if (status == FH_OK) status = join(path, root, domains[d]);
        if (status == FH_OK) status = scan_classes(s, path, group, -1, 0);
    }
    free_names(&domains, n);
    return status;
}

/* ==== label tables ==================================================================================== */

/* One CSV record (RFC 4180: quoted fields, "" inside quotes) starting at *p; fields point into the
 * buffer, which is modified. Returns the number of fields, or -1 for an unterminated quote. */
static int csv_record(char **p, char **fields, int max_fields)
{
    char *s = *p;
    int n = 0;
    for (;;) {
        char *out = s, *start = s;
        if (*s == '"') {
            s++;
            for (;;) {
                if (!*s) return -1;
                if (*s == '"' && s[1] == '"') *out++ = '"', s += 2;
                else if (*s == '"') { s++; break; }
                else *out++ = *s++;
            }
            while (*s && *s != ',' && *s != '\n' && *s != '\r') s++;
        } else {
            while (*s && *s != ',' && *s != '\n' && *s != '\r') s++;
            out = s;
        }
        char end = *s;
        *out = '\0';
        if (n < max_fields) fields[n] = start;
        n++;
        if (end == ',') { s++; continue; }
        if (end == '\r') s++;
        if (end == '\n' || (end == '\r' && *s == '\n')) s++;
        break;
    }
    *p = s;
    return n;
}

/* digits with an optional minus sign */
static int is_integer(const char *t)
{
    if (*t == '-') t++;
    if (!*t) return 0;
    for (; *t; t++)
        if (!isdigit((unsigned char)*t)) return 0;
    return 1;
}

/* comma-separated list -> names (owned: names_free) */
static int split_list(const char *text, Names *names)
{
    memset(names, 0, sizeof *names);
    const char *p = text;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char name[256];
        if (len == 0 || len >= sizeof name) FH_FAIL(FH_ERR_USAGE, "'%s': empty or overlong name in the list", text);
        memcpy(name, p, len);
        name[len] = '\0';
        int index;
        FH_CHECK(names_add(names, name, &index));
        p = comma ? comma + 1 : NULL;
    }
    return FH_OK;
}

#define CSV_MAX_FIELDS 4096

static int column_of(const char *table, char **header, int n_header, const char *key, const char *name, int *col)
{
    *col = -1;
    if (!name || !*name) return FH_OK;
    for (int i = 0; i < n_header; i++)
        if (!strcmp(header[i], name)) *col = i;
    if (*col < 0) FH_FAIL(FH_ERR_DATA, "%s: line 1: no column '%s' (%s); the header has %d columns, the first '%s'",
                          table, name, key, n_header, n_header ? header[0] : "");
    return FH_OK;
}

/* names sorted; every entry's label (groups: its group) renumbered to match */
static int sort_names(DataSource *s, Names *names, int groups)
{
    int32_t *map;
    FH_CHECK(names_sort(names, &map));
    for (int64_t i = 0; i < s->n; i++) {
        int32_t *v = groups ? &s->entries[i].group : &s->entries[i].label;
        *v = map[*v];
    }
    free(map);
    return FH_OK;
}

/* Integer labels (0 .. max, checked) as class ids: the classes become "0" .. "max", whether each has rows or not */
static int number_classes(DataSource *s)
{
    int max = -1;
    for (int i = 0; i < s->classes.n; i++) max = atoi(s->classes.v[i]) > max ? atoi(s->classes.v[i]) : max;
    int32_t *map = calloc((size_t)s->classes.n, sizeof *map);
    Names ids = { 0 };
    int status = map ? FH_OK : fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
    for (int i = 0; status == FH_OK && i < s->classes.n; i++) map[i] = atoi(s->classes.v[i]);
    for (int i = 0, index; status == FH_OK && i <= max; i++) {
        char t[32];
        snprintf(t, sizeof t, "%d", i);
        status = names_add(&ids, t, &index);
    }
    if (status == FH_OK) {
        for (int64_t i = 0; i < s->n; i++) s->entries[i].label = map[s->entries[i].label];
        names_free(&s->classes);
        s->classes = ids;
    } else names_free(&ids);
    free(map);
    return status;
}

typedef struct {
    const char *path;
    int64_t entry;
} PathAt;

static int path_at_cmp(const void *a, const void *b)
{
    const PathAt *x = a, *y = b;
    const int c = strcmp(x->path, y->path);
    return c ? c : (x->entry > y->entry) - (x->entry < y->entry);
}

/* An image listed twice is refused, with its two labels or with the same one: a repeated row would count the image
 * twice and could put it in the training and the test set at once. The message names the earliest repeat. */
static int refuse_repeated_images(const DataSource *s, const char *table)
{
    PathAt *at = malloc((size_t)s->n * sizeof *at);
    if (!at) FH_FAIL(FH_ERR_MEMORY, "out of memory checking %s for repeated images", table);
    for (int64_t i = 0; i < s->n; i++) at[i] = (PathAt){ s->entries[i].path, i };
    qsort(at, (size_t)s->n, sizeof *at, path_at_cmp);
    const SrcEntry *first = NULL, *again = NULL;
    for (int64_t i = 1, start = 0; i < s->n; i++) {
        if (strcmp(at[i].path, at[start].path)) start = i;
        else if (!again || s->entries[at[i].entry].line < again->line)
            first = &s->entries[at[start].entry], again = &s->entries[at[i].entry];
    }
    free(at);
    if (again && first->label != again->label)
        FH_FAIL(FH_ERR_DATA, "%s: line %d: image %s again, labelled '%s' here and '%s' on line %d: an image has one label "
                "(remove the wrong row)", table, again->line, again->path, s->classes.v[again->label],
                s->classes.v[first->label], first->line);
    if (again)
        FH_FAIL(FH_ERR_DATA, "%s: line %d: image %s again (line %d lists it too, also labelled '%s'): list each image "
                "once", table, again->line, again->path, first->line, s->classes.v[first->label]);
    return FH_OK;
}

static int open_csv_text(DataSource *s, const char *table, char *text)
{
    const DataSourceOptions *o = &s->o;
    char **header = NULL, **fields = NULL;
    int *hot = NULL, n_hot = 0, status = FH_OK;
    char root[SRC_PATH_MAX];
    if (o->image_root && *o->image_root) snprintf(root, sizeof root, "%s", o->image_root);
    else {
        snprintf(root, sizeof root, "%s", table);
        char *slash = strrchr(root, '/');
        if (slash) *slash = '\0';
        else snprintf(root, sizeof root, ".");
    }
    header = calloc(CSV_MAX_FIELDS, sizeof *header);
    fields = calloc(CSV_MAX_FIELDS, sizeof *fields);
    if (!header || !fields) {
        free(header);
        free(fields);
        FH_FAIL(FH_ERR_MEMORY, "out of memory reading %s", table);
    }
    char *p = text;
    int n_header = csv_record(&p, header, CSV_MAX_FIELDS);
    int c_image = -1, c_label = -1, c_client = -1, c_split = -1;
    if (n_header < 1 || n_header > CSV_MAX_FIELDS)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line 1: not a CSV header", table);
    if (status == FH_OK) status = column_of(table, header, n_header, "image_column", o->image_column, &c_image);
    if (status == FH_OK && c_image < 0)
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: image_column is empty", table);
    if (status == FH_OK) status = column_of(table, header, n_header, "client_column", o->client_column, &c_client);
    if (status == FH_OK) status = column_of(table, header, n_header, "split_column", o->split_column, &c_split);
    int one_hot = o->label_columns && *o->label_columns;
    if (status == FH_OK && one_hot) {
        /* one-hot columns (ISIC's ground truth): the class names are the columns, in the order given */
        status = split_list(o->label_columns, &s->classes);
        if (status == FH_OK && !(hot = calloc((size_t)s->classes.n, sizeof *hot)))
            status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
        for (int k = 0; status == FH_OK && k < s->classes.n; k++, n_hot++)
            status = column_of(table, header, n_header, "label_columns", s->classes.v[k], &hot[k]);
    } else if (status == FH_OK) {
        status = column_of(table, header, n_header, "label_column", o->label_column, &c_label);
        if (status == FH_OK && c_label < 0)
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: set label_column or label_columns", table);
        if (status == FH_OK && o->class_names && *o->class_names)
            status = split_list(o->class_names, &s->classes);
    }
    int fixed_classes = s->classes.n > 0, numeric = !fixed_classes;
    /* the first integer label that is no class id, kept for the message should every label be an integer */
    int bad_number_line = 0;
    char bad_number[32] = "";
    int line = 1;
    char path[SRC_PATH_MAX];
    while (status == FH_OK && *p) {
        line++;
        int nf = csv_record(&p, fields, CSV_MAX_FIELDS);
        if (nf == 1 && !*fields[0]) continue; /* blank line */
        if (nf < 0) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: unterminated quoted field", table, line);
            break;
        }
        if (nf != n_header) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: %d fields but the header has %d",
                                    table, line, nf, n_header);
            break;
        }
        int label = -1, group = -1, split = -1;
        if (one_hot) {
            for (int k = 0; k < n_hot; k++) {
                char *end;
                double v = strtod(fields[hot[k]], &end);
                if (end == fields[hot[k]] || *end || (v != 0.0 && v != 1.0)) {
                    status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: column %s = '%s' is not 0 or "
                                            "1", table, line, s->classes.v[k], fields[hot[k]]);
                    break;
                }
                if (v == 1.0 && label >= 0) {
                    status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: both %s and %s are 1 (one "
                                            "label per image)", table, line, s->classes.v[label], s->classes.v[k]);
                    break;
                }
                if (v == 1.0) label = k;
            }
            if (status == FH_OK && label < 0)
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: none of the label columns %s is "
                                        "1 (unknown label)", table, line, o->label_columns);
        } else {
            const char *value = fields[c_label];
            label = names_find(&s->classes, value);
            if (label < 0 && fixed_classes)
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: unknown label '%s' (class_names "
                                        "= %s)", table, line, value, o->class_names);
            else if (label < 0 && !*value)
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: empty label", table, line);
            else if (label < 0) status = names_add(&s->classes, value, &label);
            numeric &= is_integer(value);
            if (numeric && !bad_number_line) {
                errno = 0;
                const long long id = strtoll(value, NULL, 10);
                if (id < 0 || errno || id >= DATA_MAX_CLASSES)
                    bad_number_line = line, snprintf(bad_number, sizeof bad_number, "%.20s", value);
            }
        }
        if (status == FH_OK && c_client >= 0) status = names_add(&s->groups, fields[c_client], &group);
        if (status == FH_OK && c_split >= 0) {
            const char *v = fields[c_split];
            split = !strcmp(v, "train") ? 0 : !strcmp(v, "test") ? 1 : -2;
            if (split == -2)
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: split '%s' is neither train nor "
                                        "test", table, line, v);
        }
        if (status == FH_OK && !*fields[c_image])
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: empty image name", table, line);
        if (status == FH_OK && snprintf(path, sizeof path, "%s/%s%s", root, fields[c_image],
                                        o->image_suffix ? o->image_suffix : "") >= (int)sizeof path)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: path too long", table, line);
        if (status == FH_OK) status = add_entry(s, path, 0, label, group, split, line);
    }
    if (status == FH_OK && s->n == 0) status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: no rows", table);
    /* label values that are all integers are class ids (0 .. max), not names in text order */
    if (status == FH_OK && numeric && !one_hot && bad_number_line)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: line %d: label %s is not a class id: labels that "
                                "are all integers are the class ids 0, 1, 2, ... (up to %d); renumber them from 0, or "
                                "write the classes as names", table, bad_number_line, bad_number, DATA_MAX_CLASSES - 1);
    if (status == FH_OK && numeric && !one_hot) status = number_classes(s);
    else if (status == FH_OK && !fixed_classes && !one_hot)
        status = sort_names(s, &s->classes, 0); /* sorted, as torchvision's folders */
    /* groups in name order too: client ids follow it */
    if (status == FH_OK && s->groups.n > 1) status = sort_names(s, &s->groups, 1);
    if (status == FH_OK) status = refuse_repeated_images(s, table);
    free(header);
    free(fields);
    free(hot);
    return status;
}

/* the whole file at path, or its first `limit` bytes (*len: those read; *whole: whether they are the whole file);
 * messages name it as `name` (the path, or the path and its table line) */
static int read_head(const char *path, const char *name, size_t limit, uint8_t **data, size_t *len, size_t *cap,
                     int *whole)
{
    FILE *f = fopen(path, "rb");
    if (!f) FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        FH_FAIL(FH_ERR_DATA, "%s: not a regular file", name);
    }
    path = name;
    size_t n = (size_t)st.st_size;
    *whole = n <= limit;
    if (n > limit) n = limit;
    if (n + 1 > *cap) {
        uint8_t *grown = realloc(*data, n + 1);
        if (!grown) {
            fclose(f);
            FH_FAIL(FH_ERR_MEMORY, "%s: out of memory for %zu bytes", path, n);
        }
        *data = grown;
        *cap = n + 1;
    }
    size_t got = n ? fread(*data, 1, n, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (got != n || err) FH_FAIL(FH_ERR_DATA, "%s: read error (%zu of %zu bytes)", path, got, n);
    (*data)[n] = 0;
    *len = n;
    return FH_OK;
}

static int read_whole(const char *path, const char *name, uint8_t **data, size_t *len, size_t *cap)
{
    int whole;
    return read_head(path, name, SIZE_MAX - 1, data, len, cap, &whole);
}

static int open_csv(DataSource *s, const char *table)
{
    uint8_t *text = NULL;
    size_t len, cap = 0;
    FH_CHECK(read_whole(table, table, &text, &len, &cap));
    /* Excel's "CSV UTF-8" starts with a byte order mark, which is not part of the first column's name */
    const size_t bom = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
    int status = open_csv_text(s, table, (char *)text + bom);
    free(text);
    return status;
}

/* ==== NumPy arrays ==================================================================================== */

static int array_read(DataSource *s, SrcArray *a, int64_t offset, void *out, size_t bytes)
{
    (void)s;
    if (a->zf) {
        if (zip_fseek(a->zf, a->data_offset + offset, SEEK_SET) != 0)
            FH_FAIL(FH_ERR_DATA, "%s: cannot seek to byte %lld of the member", a->name, (long long)(a->data_offset + offset));
        zip_int64_t got = zip_fread(a->zf, out, bytes);
        if (got != (zip_int64_t)bytes) FH_FAIL(FH_ERR_DATA, "%s: member ends early (truncated archive?)", a->name);
        return FH_OK;
    }
    ssize_t got = pread(a->fd, out, bytes, (off_t)(a->data_offset + offset));
    if (got != (ssize_t)bytes) FH_FAIL(FH_ERR_DATA, "%s: file ends early at byte %lld (truncated?)", a->name,
                                       (long long)(a->data_offset + offset));
    return FH_OK;
}

/* The .npy header (format versions 1-3): dtype, order and shape. */
static int array_parse_header(SrcArray *a, const uint8_t *head, size_t len, int64_t *header_bytes)
{
    if (len < 10 || memcmp(head, "\x93NUMPY", 6))
        FH_FAIL(FH_ERR_DATA, "%s: not a .npy array (no \\x93NUMPY magic)", a->name);
    size_t hlen, start;
    if (head[6] == 1) hlen = head[8] | (size_t)head[9] << 8, start = 10;
    else if (len >= 12) hlen = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24, start = 12;
    else FH_FAIL(FH_ERR_DATA, "%s: short .npy header", a->name);
    if (start + hlen > len) FH_FAIL(FH_ERR_DATA, "%s: .npy header longer than read (%zu bytes)", a->name, hlen);
    char dict[4096];
    if (hlen >= sizeof dict) FH_FAIL(FH_ERR_DATA, "%s: .npy header of %zu bytes", a->name, hlen);
    memcpy(dict, head + start, hlen);
    dict[hlen] = '\0';
    *header_bytes = (int64_t)(start + hlen);
    const char *d = strstr(dict, "'descr'"), *fo = strstr(dict, "'fortran_order'"), *sh = strstr(dict, "'shape'");
    if (!d || !fo || !sh) FH_FAIL(FH_ERR_DATA, "%s: .npy header lacks descr, fortran_order or shape", a->name);
    char descr[16] = "";
    if (sscanf(d, "'descr': '%15[^']'", descr) != 1) FH_FAIL(FH_ERR_DATA, "%s: unreadable descr in .npy header", a->name);
    if (strstr(fo, "True")) FH_FAIL(FH_ERR_DATA, "%s: Fortran-ordered array (save it C-ordered)", a->name);
    char order = descr[0], type = descr[1];
    int size = atoi(descr + 2);
    if (order == '>' && size > 1) FH_FAIL(FH_ERR_DATA, "%s: big-endian dtype %s", a->name, descr);
    a->elem = size;
    if (type == 'u' && size == 1) a->kind = 'u';
    else if (type == 'f' && size == 4) a->kind = 'f';
    else if ((type == 'i' || type == 'u') && (size == 1 || size == 2 || size == 4 || size == 8))
        a->kind = 'i', a->is_signed = type == 'i';
    else FH_FAIL(FH_ERR_DATA, "%s: dtype %s (images: uint8 or float32; labels: integers)", a->name, descr);
    const char *p = strchr(sh, '(');
    a->ndim = 0;
    while (p && *++p && *p != ')') {
        if (isspace((unsigned char)*p) || *p == ',') continue;
        if (a->ndim == 4) FH_FAIL(FH_ERR_DATA, "%s: more than 4 dimensions", a->name);
        char *end;
        a->shape[a->ndim++] = strtoll(p, &end, 10);
        p = end - 1;
    }
    if (a->ndim == 0) FH_FAIL(FH_ERR_DATA, "%s: a scalar, not an array", a->name);
    return FH_OK;
}

/* Opens `member` of the .npz (zip) or dir/member (.npy); *found 0 when absent. */
static int array_open(DataSource *s, const char *where, const char *member, SrcArray *a, int *found)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    *found = 0;
    snprintf(a->name, sizeof a->name, "%s%s%s", where, s->zip ? ":" : "/", member);
    uint8_t head[4096 + 16];
    size_t got;
    if (s->zip) {
        zip_int64_t i = zip_name_locate(s->zip, member, 0);
        if (i < 0) return FH_OK;
        zip_stat_t st;
        if (zip_stat_index(s->zip, (zip_uint64_t)i, 0, &st) != 0) FH_FAIL(FH_ERR_DATA, "%s: cannot read its entry", a->name);
        zip_file_t *zf = zip_fopen_index(s->zip, (zip_uint64_t)i, 0);
        if (!zf) FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", a->name, zip_strerror(s->zip));
        zip_int64_t n = zip_fread(zf, head, sizeof head - 16);
        got = n > 0 ? (size_t)n : 0;
        if (st.comp_method == ZIP_CM_STORE) {
            a->zf = zf; /* read in place, seeking */
        } else {
            /* compressed (np.savez_compressed): inflated once into an unlinked temporary file */
            zip_fclose(zf);
            zf = zip_fopen_index(s->zip, (zip_uint64_t)i, 0);
            char tmpl[] = "/tmp/fedhet-npz-XXXXXX";
            a->fd = mkstemp(tmpl);
            if (a->fd < 0 || !zf) {
                if (zf) zip_fclose(zf);
                FH_FAIL(FH_ERR_IO, "%s: cannot make a temporary file in /tmp: %s", a->name, strerror(errno));
            }
            unlink(tmpl);
            char chunk[1 << 16];
            zip_int64_t r;
            while ((r = zip_fread(zf, chunk, sizeof chunk)) > 0)
                if (write(a->fd, chunk, (size_t)r) != (ssize_t)r) {
                    zip_fclose(zf);
                    FH_FAIL(FH_ERR_IO, "%s: cannot write its temporary copy: %s", a->name, strerror(errno));
                }
            zip_fclose(zf);
            if (r < 0) FH_FAIL(FH_ERR_DATA, "%s: corrupt compressed member", a->name);
        }
    } else {
        char path[SRC_PATH_MAX];
        FH_CHECK(join(path, where, member));
        a->fd = open(path, O_RDONLY);
        if (a->fd < 0) return FH_OK;
        ssize_t n = pread(a->fd, head, sizeof head - 16, 0);
        got = n > 0 ? (size_t)n : 0;
    }
    *found = 1;
    int64_t header_bytes = 0;
    FH_CHECK(array_parse_header(a, head, got, &header_bytes));
    a->data_offset = header_bytes;
    return FH_OK;
}

static void array_close(SrcArray *a)
{
    if (a->zf) zip_fclose(a->zf);
    if (a->fd >= 0) close(a->fd);
    memset(a, 0, sizeof *a);
    a->fd = -1;
}

/* integer labels of an array -> entries (split given) */
static int array_labels(DataSource *s, SrcArray *labels, int64_t n_images, int split)
{
    if (labels->kind == 'u') labels->kind = 'i', labels->is_signed = 0; /* uint8 labels */
    if (labels->kind != 'i' || labels->ndim != 1)
        FH_FAIL(FH_ERR_DATA, "%s: labels must be a 1-D integer array", labels->name);
    if (labels->shape[0] != n_images)
        FH_FAIL(FH_ERR_DATA, "%s: %lld labels for %lld images", labels->name, (long long)labels->shape[0],
                (long long)n_images);
    uint8_t raw[8];
    for (int64_t i = 0; i < n_images; i++) {
        FH_CHECK(array_read(s, labels, i * labels->elem, raw, (size_t)labels->elem));
        int64_t v = 0;
        uint64_t u = 0;
        for (int b = labels->elem - 1; b >= 0; b--) u = u << 8 | raw[b];
        if (labels->is_signed && labels->elem < 8 && (u >> (8 * labels->elem - 1)) & 1) u |= ~0ull << (8 * labels->elem);
        v = (int64_t)u;
        if (v < 0 || v > 65535 || (!labels->is_signed && u > 65535))
            FH_FAIL(FH_ERR_DATA, "%s: label %lld at row %lld (need 0..65535)", labels->name, (long long)v, (long long)i);
        FH_CHECK(add_entry(s, NULL, i, (int)v, -1, split, 0));
        if (v + 1 > s->classes.n) s->classes.n = (int)v + 1;
    }
    return FH_OK;
}

static int array_shape(DataSource *s, SrcArray *a)
{
    int c, h, w, nchw = 0;
    if (a->kind == 'i') FH_FAIL(FH_ERR_DATA, "%s: images must be uint8 or float32", a->name);
    if (a->ndim == 3) c = 1, h = (int)a->shape[1], w = (int)a->shape[2];
    else if (a->ndim == 4) {
        const char *layout = s->o.layout && *s->o.layout ? s->o.layout : "auto";
        if (!strcmp(layout, "nchw") || (!strcmp(layout, "auto") && (a->shape[1] == 1 || a->shape[1] == 3) &&
                                        a->shape[3] != 1 && a->shape[3] != 3))
            nchw = 1;
        c = (int)(nchw ? a->shape[1] : a->shape[3]);
        h = (int)(nchw ? a->shape[2] : a->shape[1]);
        w = (int)(nchw ? a->shape[3] : a->shape[2]);
    } else FH_FAIL(FH_ERR_DATA, "%s: images need 3 (N,H,W) or 4 (NHWC / NCHW) dimensions, not %d", a->name, a->ndim);
    if ((c != 1 && c != 3) || h < 1 || w < 1 || h > 32768 || w > 32768)
        FH_FAIL(FH_ERR_DATA, "%s: image shape %dx%dx%d (%s; need 1 or 3 channels)", a->name, c, h, w,
                nchw ? "NCHW" : "NHWC");
    if (s->o.image.max_pixels > 0 && (int64_t)w * h > s->o.image.max_pixels)
        FH_FAIL(FH_ERR_DATA, "%s: images of %dx%d are %lld pixels, more than max_pixels = %lld; if they are meant to be "
                "this large, raise the source option max_pixels", a->name, w, h, (long long)w * h,
                (long long)s->o.image.max_pixels);
    if (s->array_c && (c != s->array_c || h != s->array_h || w != s->array_w || nchw != s->nchw))
        FH_FAIL(FH_ERR_DATA, "%s: test images are %dx%dx%d but training images %dx%dx%d", a->name, c, h, w, s->array_c,
                s->array_h, s->array_w);
    s->array_c = c, s->array_h = h, s->array_w = w, s->nchw = nchw;
    return FH_OK;
}

static int open_arrays(DataSource *s, const char *where)
{
    static const char *const names[3][4] = { { "x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy" },
                                             { "train_images.npy", "train_labels.npy", "test_images.npy",
                                               "test_labels.npy" },
                                             { "images.npy", "labels.npy", "", "" } };
    for (int v = 0; v < 3; v++) {
        int found;
        FH_CHECK(array_open(s, where, names[v][0], &s->arrays[0], &found));
        if (!found) continue;
        for (int part = 0; part < 2; part++) {
            if (part == 1) {
                if (!*names[v][2]) break;
                FH_CHECK(array_open(s, where, names[v][2], &s->arrays[1], &found));
                if (!found) break;
            }
            SrcArray labels;
            FH_CHECK(array_open(s, where, names[v][2 * part + 1], &labels, &found));
            if (!found) FH_FAIL(FH_ERR_DATA, "%s: has %s but not %s", where, names[v][2 * part], names[v][2 * part + 1]);
            int status = array_shape(s, &s->arrays[part]);
            if (status == FH_OK) status = array_labels(s, &labels, s->arrays[part].shape[0], part);
            array_close(&labels);
            FH_CHECK(status);
        }
        /* without a test array, test_fraction decides */
        if (!s->arrays[1].ndim)
            for (int64_t i = 0; i < s->n; i++) s->entries[i].split = -1;
        return FH_OK;
    }
    FH_FAIL(FH_ERR_DATA, "%s: holds none of x_train.npy + y_train.npy, train_images.npy + train_labels.npy, images.npy + "
            "labels.npy", where);
}

/* ==== decoding one row ================================================================================ */

static int load_array_row(DataSource *s, const SrcEntry *e, ImgBuf *out)
{
    SrcArray *a = &s->arrays[e->split == 1 && s->arrays[1].ndim ? 1 : 0];
    const int c = s->array_c, h = s->array_h, w = s->array_w;
    const size_t n = (size_t)c * h * w;
    FH_CHECK(img_buf_reserve(&s->scratch, (int)(n * a->elem), 1, 1));
    FH_CHECK(array_read(s, a, e->row * (int64_t)(n * a->elem), s->scratch.pixels, n * a->elem));
    FH_CHECK(img_buf_reserve(out, w, h, c));
    const float scale = (float)(255.0 / s->o.float_max);
    for (size_t i = 0; i < n; i++) {
        /* element i of the stored order -> interleaved [h, w, c] */
        size_t dst = s->nchw ? (i % ((size_t)h * w)) * c + i / ((size_t)h * w) : i;
        if (a->kind == 'u') out->pixels[dst] = s->scratch.pixels[i];
        else {
            float v;
            memcpy(&v, s->scratch.pixels + 4 * i, 4);
            if (!(v >= 0.0f && v <= (float)s->o.float_max))
                FH_FAIL(FH_ERR_DATA, "%s: row %lld holds %g, outside 0..%g (float_max)", a->name, (long long)e->row, v,
                        s->o.float_max);
            out->pixels[dst] = (uint8_t)lrintf(v * scale);
        }
    }
    return FH_OK;
}

/* entry -> [c, h, w] at the output size */
/* an image file as messages name it: its path, and its table line */
static const char *entry_name(const SrcEntry *e, char *where, size_t size)
{
    if (!e->line) return e->path;
    snprintf(where, size, "%s (line %d)", e->path, e->line);
    return where;
}

static int load_entry(DataSource *s, const SrcEntry *e, uint8_t *image)
{
    int w, h, ow, oh;
    const char *name;
    char where[SRC_PATH_MAX + 32];
    if (e->path) {
        size_t len;
        name = entry_name(e, where, sizeof where);
        FH_CHECK(read_whole(e->path, name, &s->file, &len, &s->file_cap));
        FH_CHECK(img_decode(name, s->file, len, s->c, &s->o.image, &s->buf, &s->scratch, &w, &h));
    } else {
        FH_CHECK(load_array_row(s, e, &s->buf));
        w = s->buf.w, h = s->buf.h;
        snprintf(where, sizeof where, "%s row %lld", s->arrays[e->split == 1 && s->arrays[1].ndim].name, (long long)e->row);
        name = where;
    }
    FH_CHECK(img_target(&s->o.image, name, w, h, &ow, &oh));
    if (ow != s->w || oh != s->h)
        FH_FAIL(FH_ERR_DATA, "%s: %dx%d gives a %dx%d image but the first gives %dx%d (set size= and resize= to make them "
                "agree)", name, w, h, ow, oh, s->w, s->h);
    return img_fit(&s->o.image, &s->buf, w, h, s->c, ow, oh, image, &s->resizer);
}

static int fetch_row(void *ctx, int64_t row, uint8_t *image)
{
    SrcFetch *f = ctx;
    return load_entry(f->src, &f->src->entries[f->rows[row]], image);
}

/* The header of an entry's image file, from its first 64 KiB (a JPEG's header ends where its first scan starts,
 * after its EXIF and colour profile, so nearly always sooner), else from the whole file */
static int probe_entry(DataSource *s, const SrcEntry *e, int *w, int *h, int *c)
{
    char where[SRC_PATH_MAX + 32];
    const char *name = entry_name(e, where, sizeof where);
    size_t len;
    int whole;
    FH_CHECK(read_head(e->path, name, (size_t)64 << 10, &s->file, &len, &s->file_cap, &whole));
    const int status = img_probe(name, s->file, len, &s->o.image, w, h, c);
    if (status == FH_OK) return FH_OK;
    if (whole) return fh_error_trace(status, __FILE__, __LINE__, "img_probe");
    fh_error_clear();
    FH_CHECK(read_whole(e->path, name, &s->file, &len, &s->file_cap));
    return img_probe(name, s->file, len, &s->o.image, w, h, c);
}

/* The output shape from the first entry; channels = auto: 3 when any image is colour, else 1 (the headers are read
 * until the first colour one: a grey first image does not make a colour set grey) */
static int first_shape(DataSource *s)
{
    const SrcEntry *e = &s->entries[0];
    int w, h, c;
    if (e->path) FH_CHECK(probe_entry(s, e, &w, &h, &c));
    else w = s->array_w, h = s->array_h, c = s->array_c;
    s->c = s->o.image.channels ? s->o.image.channels : c;
    for (int64_t i = 1; e->path && !s->o.image.channels && s->c == 1 && i < s->n; i++) {
        int wi, hi, ci;
        const int status = probe_entry(s, &s->entries[i], &wi, &hi, &ci);
        if (status != FH_OK && !s->o.skip_unreadable) return status;
        if (status != FH_OK) fh_error_clear(); /* on_error = skip leaves it out, and names it, later */
        else if (ci == 3) s->c = 3;
    }
    return img_target(&s->o.image, e->path ? e->path : s->arrays[0].name, w, h, &s->w, &s->h);
}

/* on_error = skip: every image decoded once before the partition, the unreadable ones left out */
static int drop_unreadable(DataSource *s)
{
    uint8_t *image = NULL;
    FH_CHECK(fh_calloc(&image, (size_t)s->c * s->h * s->w, 1, "image"));
    int64_t kept = 0;
    size_t used = 0;
    for (int64_t i = 0; i < s->n; i++) {
        int status = load_entry(s, &s->entries[i], image);
        if (status == FH_ERR_IO) {
            fh_free(&image);
            return status;
        }
        if (status != FH_OK) {
            if (s->skipped < SRC_MAX_SKIP_NAMES && used < sizeof s->skip_names)
                used += (size_t)snprintf(s->skip_names + used, sizeof s->skip_names - used, "%s%s",
                                         s->skipped ? "; " : "", fh_error_text(status));
            fh_error_clear();
            s->skipped++;
            free(s->entries[i].path);
            continue;
        }
        s->entries[kept++] = s->entries[i];
    }
    s->n = kept;
    fh_free(&image);
    if (s->n == 0) FH_FAIL(FH_ERR_DATA, "no readable image left after skipping %lld: %s", (long long)s->skipped, s->skip_names);
    return FH_OK;
}

/* ==== splits ========================================================================================== */

/* holdout_domain names no domain: the nearest one, and every domain the source has */
static int unknown_domain(const DataSource *s, const char *name)
{
    char list[2048] = "";
    size_t used = 0;
    for (int g = 0; g < s->groups.n && used < sizeof list; g++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", g ? ", " : "", s->groups.v[g]);
    const char *near = fh_nearest_name(name, (const char *const *)s->groups.v, s->groups.n);
    FH_FAIL(FH_ERR_USAGE, "holdout_domain: no domain '%s'%s%s%s (the source's %d domains: %s)", name,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", s->groups.n, list);
}

static int assign_splits(DataSource *s)
{
    const DataSourceOptions *o = &s->o;
    if (o->holdout_domain && *o->holdout_domain) {
        if (!s->groups.n)
            FH_FAIL(FH_ERR_USAGE, "holdout_domain = %s but the source has no domains (a domain tree, or a table with "
                    "client_column)", o->holdout_domain);
        Names held;
        FH_CHECK(split_list(o->holdout_domain, &held));
        int8_t *is_held = calloc((size_t)s->groups.n, 1);
        int status = is_held ? FH_OK : fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
        for (int i = 0; i < held.n && status == FH_OK; i++) {
            int g = names_find(&s->groups, held.v[i]);
            if (g < 0) status = unknown_domain(s, held.v[i]);
            else is_held[g] = 1;
        }
        for (int64_t i = 0; i < s->n && status == FH_OK; i++) s->entries[i].split = is_held[s->entries[i].group];
        free(is_held);
        names_free(&held);
        return status;
    }
    int64_t undecided = 0;
    for (int64_t i = 0; i < s->n; i++) undecided += s->entries[i].split < 0;
    if (!undecided) return FH_OK;
    /* test_fraction of each (group, class) cell, chosen by a Philox permutation of the cell */
    const int G = s->groups.n ? s->groups.n : 1, C = s->classes.n;
    int64_t *count = calloc((size_t)G * C + 1, sizeof *count), *cell = malloc((size_t)s->n * sizeof *cell),
            *perm = malloc((size_t)s->n * sizeof *perm);
    int status = count && cell && perm ? FH_OK : fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory");
    for (int64_t i = 0; i < s->n && status == FH_OK; i++)
        if (s->entries[i].split < 0) count[(int64_t)(s->entries[i].group < 0 ? 0 : s->entries[i].group) * C + s->entries[i].label + 1]++;
    for (int64_t k = 0; k < (int64_t)G * C && status == FH_OK; k++) count[k + 1] += count[k];
    for (int64_t i = 0; i < s->n && status == FH_OK; i++)
        if (s->entries[i].split < 0)
            cell[count[(int64_t)(s->entries[i].group < 0 ? 0 : s->entries[i].group) * C + s->entries[i].label]++] = i;
    /* count[k] is now the end of cell k */
    for (int64_t k = 0, start = 0; k < (int64_t)G * C && status == FH_OK; start = count[k], k++) {
        const int64_t n = count[k] - start, n_test = (int64_t)llround(o->test_fraction * (double)n);
        FhRng rng;
        fh_rng_init(&rng, o->seed, FH_RNG_PARTITION, SRC_SPLIT_TAG, (uint32_t)(k / C), (uint32_t)(k % C));
        fh_rng_permutation(&rng, perm, n);
        for (int64_t j = 0; j < n; j++) s->entries[cell[start + perm[j]]].split = j < n_test;
    }
    free(count), free(cell), free(perm);
    return status;
}

/* ==== the sets ======================================================================================== */

static int make_set(DataSource *s, DataImageSet *set, int split)
{
    memset(set, 0, sizeof *set);
    int64_t n = 0;
    for (int64_t i = 0; i < s->n; i++) n += s->entries[i].split == split;
    set->n = n, set->c = s->c, set->h = s->h, set->w = s->w, set->classes = s->classes.n;
    FH_CHECK(fh_calloc(&s->rows[split], (size_t)(n ? n : 1), sizeof *s->rows[split], "set rows"));
    FH_CHECK(fh_calloc(&set->labels, (size_t)(n ? n : 1), sizeof *set->labels, "labels"));
    FH_CHECK(fh_calloc(&set->source_index, (size_t)(n ? n : 1), sizeof *set->source_index, "source indices"));
    if (s->groups.n) FH_CHECK(fh_calloc(&set->groups, (size_t)(n ? n : 1), sizeof *set->groups, "groups"));
    if (s->n && s->entries[0].path) FH_CHECK(fh_calloc(&set->paths, (size_t)(n ? n : 1), sizeof *set->paths, "paths"));
    for (int64_t i = 0, r = 0; i < s->n; i++) {
        if (s->entries[i].split != split) continue;
        s->rows[split][r] = i;
        set->labels[r] = s->entries[i].label;
        set->source_index[r] = s->entries[i].index;
        if (set->groups) set->groups[r] = s->entries[i].group;
        if (set->paths) set->paths[r] = s->entries[i].path;
        r++;
    }
    s->fetch[split] = (SrcFetch){ s, s->rows[split] };
    set->fetch = fetch_row;
    set->fetch_ctx = &s->fetch[split];
    set->n_groups = s->groups.n;
    set->group_names = s->groups.v;
    set->class_names = s->classes.v;
    return FH_OK;
}

static const char *detect_layout(const char *src)
{
    struct stat st;
    if (stat(src, &st) != 0) return NULL;
    const char *dot = strrchr(src, '.');
    if (!S_ISDIR(st.st_mode)) {
        if (dot && !strcasecmp(dot, ".csv")) return "csv";
        if (dot && !strcasecmp(dot, ".npz")) return "npz";
        return NULL;
    }
    char path[SRC_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/x_train.npy", src) < (int)sizeof path && access(path, R_OK) == 0) return "npy";
    if (snprintf(path, sizeof path, "%s/train_images.npy", src) < (int)sizeof path && access(path, R_OK) == 0) return "npy";
    if (snprintf(path, sizeof path, "%s/images.npy", src) < (int)sizeof path && access(path, R_OK) == 0) return "npy";
    if (snprintf(path, sizeof path, "%s/train", src) < (int)sizeof path && is_dir(path)) return "imagefolder";
    /* class folders holding images, or domain folders holding class folders */
    char **dirs;
    int n;
    if (list_dir(src, 1, &dirs, &n) != FH_OK) {
        fh_error_clear();
        return "imagefolder"; /* a folder that cannot be listed whole (a link loop): its scan says why */
    }
    const char *layout = NULL;
    if (n > 0 && snprintf(path, sizeof path, "%s/%s", src, dirs[0]) < (int)sizeof path) {
        char **sub;
        int n_sub;
        if (list_dir(path, 1, &sub, &n_sub) == FH_OK) {
            layout = n_sub > 0 ? "domains" : "imagefolder";
            free_names(&sub, n_sub);
        } else {
            fh_error_clear();
            layout = "imagefolder"; /* a tree all the same: its scan reports what is wrong in it (a link loop) */
        }
    }
    free_names(&dirs, n);
    return layout;
}

int data_source_is_image_format(const char *format);
int data_source_is_image_format(const char *format)
{
    static const char *const names[] = { "imagefolder", "domains", "csv", "npy", "npz" };
    for (int i = 0; i < 5; i++)
        if (format && !strcmp(format, names[i])) return 1;
    return 0;
}

const char *data_source_detect_layout(const char *src);
const char *data_source_detect_layout(const char *src) { return detect_layout(src); }

int data_image_source_open(DataSource **out, DataImageSet *train, DataImageSet *test, const char *src,
                           const DataSourceOptions *o, const char *format);
int data_image_source_open(DataSource **out, DataImageSet *train, DataImageSet *test, const char *src,
                           const DataSourceOptions *o, const char *format)
{
    DataSource *s = calloc(1, sizeof *s);
    if (!s) FH_FAIL(FH_ERR_MEMORY, "out of memory opening %s", src);
    s->o = *o;
    s->format = format;
    s->arrays[0].fd = s->arrays[1].fd = -1;
    int status = FH_OK;
    if (!strcmp(format, "imagefolder")) status = open_imagefolder(s, src);
    else if (!strcmp(format, "domains")) status = open_domains(s, src);
    else if (!strcmp(format, "csv")) status = open_csv(s, src);
    else {
        if (!strcmp(format, "npz")) {
            int err = 0;
            s->zip = zip_open(src, ZIP_RDONLY, &err);
            if (!s->zip) {
                zip_error_t ze;
                zip_error_init_with_code(&ze, err);
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: not a readable .npz (zip) archive: %s", src,
                                        zip_error_strerror(&ze));
                zip_error_fini(&ze);
            }
        }
        if (status == FH_OK) status = open_arrays(s, src);
    }
    if (status == FH_OK && s->n == 0) status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: no images", src);
    if (status == FH_OK && s->classes.n > DATA_MAX_CLASSES)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s (%s): %d classes; a partition file holds at most %d",
                                src, format, s->classes.n, DATA_MAX_CLASSES);
    if (status == FH_OK && s->classes.n < 2)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s (%s): one class only ('%s'); a classifier needs two or "
                                "more (is this the right folder?)", src, format, s->classes.v ? s->classes.v[0] : "0");
    if (status == FH_OK && s->ignored)
        printf("ignored     %lld files without a .jpg, .jpeg or .png extension under %s\n", (long long)s->ignored, src);
    if (status == FH_OK) status = first_shape(s);
    if (status == FH_OK && o->skip_unreadable) status = drop_unreadable(s);
    if (status == FH_OK) status = assign_splits(s);
    if (status == FH_OK) status = make_set(s, train, 0);
    if (status == FH_OK) status = make_set(s, test, 1);
    if (status == FH_OK && train->n == 0)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: no training images (every image is in the test set)", src);
    if (status != FH_OK) {
        data_imageset_free(train);
        data_imageset_free(test);
        data_source_close(&s);
        return status;
    }
    *out = s;
    return FH_OK;
}

int64_t data_source_skipped(const DataSource *s, const char **first_names)
{
    if (first_names) *first_names = s ? s->skip_names : "";
    return s ? s->skipped : 0;
}

void data_source_close(DataSource **sp)
{
    DataSource *s = *sp;
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) free(s->entries[i].path);
    free(s->entries);
    names_free(&s->classes);
    names_free(&s->groups);
    free(s->rows[0]);
    free(s->rows[1]);
    array_close(&s->arrays[0]);
    array_close(&s->arrays[1]);
    if (s->zip) zip_discard(s->zip);
    img_buf_free(&s->buf);
    img_buf_free(&s->scratch);
    img_resizer_free(&s->resizer);
    free(s->file);
    free(s);
    *sp = NULL;
}
