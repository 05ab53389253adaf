/* Per-client persistent state out of core: the run folder's client-state.bin (docs/architecture.md, "Client state").
 *
 * A file of fixed-size slots after a 4 KiB header; a slot holds one client's persistent floats (the method's client
 * vectors, then its client floats) behind a 64-byte slot header naming the client and the round that wrote it. The
 * owner of a client reads and writes its slots with pread/pwrite, so any number of ranks write the one file at once
 * (a serial HDF5 file allows one writer) and a kill mid-write damages no other slot.
 *
 * Slots are never overwritten while a durable file refers to them: every round gives each selected client a new
 * slot (the lowest free one), and a client's previous slot is freed once nothing refers to it any more: at the end
 * of the round if no checkpoint holds it, else when the next checkpoint is committed. A checkpoint stores the table
 * client -> (slot, round) and never copies the file. Every rank runs the same allocation from the broadcast
 * selection, so all ranks agree on the table without messages and the slots do not depend on the rank count; after
 * a checkpoint the slots in use are exactly those of its table, so a resumed run allocates the same slots. */
#include "fl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/buf.h"
#include "fedhet/core.h"

#define STORE_MAGIC "fedhet-client-state"
#define STORE_VERSION 1
#define STORE_HEADER_BYTES 4096
#define SLOT_HEADER_BYTES 64
#define SLOT_MAGIC 0x746f6c7374686625ull /* "%fhtslot" */

typedef struct {
    char magic[24];
    int64_t version, n_clients, slot_floats, slot_bytes;
    uint64_t layout_hash;
} StoreHeader;

typedef struct {
    uint64_t magic;
    int64_t client, round, slot_floats;
} SlotHeader;

static int64_t slot_bytes_for(int64_t slot_floats)
{
    const int64_t page = 4096, b = SLOT_HEADER_BYTES + slot_floats * (int64_t)sizeof(float);
    return (b + page - 1) / page * page;
}

static off_t slot_offset(const FlStore *st, int64_t slot) { return (off_t)(STORE_HEADER_BYTES + slot * st->slot_bytes); }

static int io_all(int write, int fd, void *buf, size_t n, off_t at, const char *path, const char *what)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = write ? pwrite(fd, p, n, at) : pread(fd, p, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) FH_FAIL(FH_ERR_IO, "%s: %s %s failed: %s", path, write ? "writing" : "reading", what, strerror(errno));
        if (r == 0) FH_FAIL(FH_ERR_IO, "%s: %s ends early (a short or truncated file)", path, what);
        p += r, n -= (size_t)r, at += r;
    }
    return FH_OK;
}

/* ---- the slot allocator: a bitmap of the slots in use, lowest free first ---- */

static int64_t slot_take(FlStore *st)
{
    for (int64_t w = st->hint / 64; w < st->n_words; w++) {
        if (st->used[w] == ~0ull) continue;
        const int64_t slot = w * 64 + __builtin_ctzll(~st->used[w]);
        st->used[w] |= 1ull << (slot % 64);
        st->hint = slot + 1;
        return slot;
    }
    return -1; /* cannot happen: the bitmap holds every slot the table and a round can use */
}

static void slot_give(FlStore *st, int64_t slot)
{
    if (slot < 0) return;
    st->used[slot / 64] &= ~(1ull << (slot % 64));
    if (slot < st->hint) st->hint = slot;
}

static void slots_rebuild(FlStore *st)
{
    memset(st->used, 0, (size_t)st->n_words * sizeof *st->used);
    for (int k = 0; k < st->n_clients; k++)
        if (st->now[k].slot >= 0) st->used[st->now[k].slot / 64] |= 1ull << (st->now[k].slot % 64);
    st->hint = 0;
}

/* ---- setup ---- */

static int write_header(const FlStore *st, const StoreHeader *h)
{
    char page[STORE_HEADER_BYTES] = { 0 };
    memcpy(page, h, sizeof *h);
    return io_all(1, st->fd, page, sizeof page, 0, st->path, "the header");
}

static int open_file(FlStore *st, int rank, int fresh)
{
    StoreHeader h = { .version = STORE_VERSION, .n_clients = st->n_clients, .slot_floats = st->slot_floats,
                      .slot_bytes = st->slot_bytes, .layout_hash = st->layout_hash };
    memcpy(h.magic, STORE_MAGIC, sizeof STORE_MAGIC);
    if (rank == 0 && fresh) { /* a new or restarted run: no checkpoint refers to an earlier file */
        st->fd = open(st->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (st->fd < 0) FH_FAIL(FH_ERR_IO, "%s: cannot create: %s", st->path, strerror(errno));
        FH_CHECK(write_header(st, &h));
        if (fdatasync(st->fd) != 0) FH_FAIL(FH_ERR_IO, "%s: cannot sync: %s", st->path, strerror(errno));
        return FH_OK;
    }
    st->fd = open(st->path, O_RDWR | O_CLOEXEC);
    if (st->fd < 0 && errno == ENOENT && rank == 0) { /* a checkpoint of an older format holds the state itself */
        st->fd = open(st->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (st->fd >= 0) return write_header(st, &h);
    }
    if (st->fd < 0) FH_FAIL(FH_ERR_IO, "%s: cannot open: %s", st->path, strerror(errno));
    StoreHeader got;
    FH_CHECK(io_all(0, st->fd, &got, sizeof got, 0, st->path, "the header"));
    if (memcmp(got.magic, STORE_MAGIC, sizeof STORE_MAGIC) != 0 || got.version != STORE_VERSION)
        FH_FAIL(FH_ERR_IO, "%s: not a fedhet client-state file of version %d", st->path, STORE_VERSION);
    if (got.n_clients != h.n_clients || got.slot_floats != h.slot_floats || got.slot_bytes != h.slot_bytes ||
        got.layout_hash != h.layout_hash)
        FH_FAIL(FH_ERR_IO, "%s: holds %lld clients of %lld floats (model layout %016llx); this run has %lld of %lld "
                "(layout %016llx)", st->path, (long long)got.n_clients, (long long)got.slot_floats,
                (unsigned long long)got.layout_hash, (long long)h.n_clients, (long long)h.slot_floats,
                (unsigned long long)h.layout_hash);
    return FH_OK;
}

int fl_store_open(FlStore *st, FlComm *c, const char *dir, int n_clients, int64_t slot_floats, uint64_t layout_hash,
                  int m_max, int fresh)
{
    memset(st, 0, sizeof *st);
    st->fd = -1;
    st->n_clients = n_clients;
    st->slot_floats = slot_floats;
    st->slot_bytes = slot_bytes_for(slot_floats);
    st->layout_hash = layout_hash;
    /* the table's slots and a round's new ones: at most 2K + m in use at once */
    st->n_words = ((int64_t)2 * n_clients + m_max + 64) / 64;
    FH_CHECK(fh_calloc(&st->now, (size_t)n_clients, sizeof *st->now, "client state table"));
    FH_CHECK(fh_calloc(&st->saved, (size_t)n_clients, sizeof *st->saved, "client state table"));
    FH_CHECK(fh_calloc(&st->moved, (size_t)n_clients, sizeof *st->moved, "client state table"));
    FH_CHECK(fh_calloc(&st->used, (size_t)st->n_words, sizeof *st->used, "client state slots"));
    FH_CHECK(fh_calloc(&st->journal, (size_t)(m_max > 0 ? m_max : 1), sizeof *st->journal, "client state journal"));
    for (int k = 0; k < n_clients; k++) st->now[k] = st->saved[k] = (FlStoreEntry){ -1, -1 };
    if (slot_floats == 0) return FH_OK; /* the method keeps no per-client floats: the table alone */
    if (snprintf(st->path, sizeof st->path, "%s/client-state.bin", dir) >= (int)sizeof st->path)
        FH_FAIL(FH_ERR_IO, "%s: path too long", dir);
    FH_CHECK(fl_agree(c, c->rank == 0 ? open_file(st, 0, fresh) : FH_OK));
    return fl_agree(c, c->rank != 0 ? open_file(st, c->rank, 0) : FH_OK);
}

void fl_store_close(FlStore *st)
{
    if (st->fd >= 0) close(st->fd);
    fh_free(&st->now);
    fh_free(&st->saved);
    fh_free(&st->moved);
    fh_free(&st->used);
    fh_free(&st->journal);
    st->fd = -1;
}

/* the slot holds client k's state of round `round` */
static int slot_holds(const FlStore *st, const SlotHeader *h, int k, int64_t round)
{
    return h->magic == SLOT_MAGIC && h->client == k && h->round == round && h->slot_floats == st->slot_floats;
}

/* ---- a round ---- */

void fl_store_round(FlStore *st, const int32_t *selected, int n, int round)
{
    st->n_journal = n;
    for (int i = 0; i < n; i++) {
        const int k = selected[i];
        st->journal[i] = (FlStoreJournal){ k, st->now[k] };
        st->now[k] = (FlStoreEntry){ slot_take(st), round };
    }
}

void fl_store_round_end(FlStore *st)
{
    for (int i = 0; i < st->n_journal; i++) {
        const FlStoreJournal *j = &st->journal[i];
        if (j->before.slot != st->saved[j->client].slot) slot_give(st, j->before.slot); /* no file refers to it */
        else st->moved[st->n_moved++] = j->client;
    }
    st->n_journal = 0;
}

void fl_store_round_undo(FlStore *st)
{
    for (int i = st->n_journal - 1; i >= 0; i--) {
        const FlStoreJournal *j = &st->journal[i];
        slot_give(st, st->now[j->client].slot);
        st->now[j->client] = j->before;
    }
    st->n_journal = 0;
}

int fl_store_load(FlStore *st, int slot_in_round, float *block)
{
    const FlStoreEntry e = st->journal[slot_in_round].before;
    const int k = st->journal[slot_in_round].client;
    block[st->slot_floats] = e.slot >= 0 ? 1.0f : 0.0f; /* the has-state flag after the floats */
    if (e.slot < 0 || st->slot_floats == 0) {
        memset(block, 0, (size_t)st->slot_floats * sizeof *block);
        return FH_OK;
    }
    SlotHeader h;
    FH_CHECK(io_all(0, st->fd, &h, sizeof h, slot_offset(st, e.slot), st->path, "a slot header"));
    if (!slot_holds(st, &h, k, e.round))
        FH_FAIL(FH_ERR_IO, "%s: slot %lld should hold client %d of round %lld but holds %s", st->path,
                (long long)e.slot, k, (long long)e.round + 1, h.magic == SLOT_MAGIC ? "another client's state" : "no state");
    return io_all(0, st->fd, block, (size_t)st->slot_floats * sizeof *block, slot_offset(st, e.slot) + SLOT_HEADER_BYTES,
                  st->path, "a client's state");
}

int fl_store_put(FlStore *st, int client, const float *block)
{
    if (st->slot_floats == 0) return FH_OK;
    const FlStoreEntry e = st->now[client];
    SlotHeader h = { SLOT_MAGIC, client, e.round, st->slot_floats };
    char head[SLOT_HEADER_BYTES] = { 0 };
    memcpy(head, &h, sizeof h);
    FH_CHECK(io_all(1, st->fd, head, sizeof head, slot_offset(st, e.slot), st->path, "a slot header"));
    FH_CHECK(io_all(1, st->fd, (void *)block, (size_t)st->slot_floats * sizeof *block,
                    slot_offset(st, e.slot) + SLOT_HEADER_BYTES, st->path, "a client's state"));
    st->dirty = 1;
    return FH_OK;
}

/* ---- checkpoints ---- */

int fl_store_sync(FlStore *st)
{
    if (st->fd < 0 || !st->dirty) return FH_OK;
    if (fdatasync(st->fd) != 0) FH_FAIL(FH_ERR_IO, "%s: cannot sync: %s", st->path, strerror(errno));
    st->dirty = 0;
    return FH_OK;
}

void fl_store_committed(FlStore *st)
{
    for (int i = 0; i < st->n_moved; i++) {
        const int k = st->moved[i];
        slot_give(st, st->saved[k].slot);
        st->saved[k] = st->now[k];
    }
    st->n_moved = 0;
}

void fl_store_set_table(FlStore *st, const FlStoreEntry *table)
{
    memcpy(st->now, table, (size_t)st->n_clients * sizeof *table);
    memcpy(st->saved, table, (size_t)st->n_clients * sizeof *table);
    st->n_moved = st->n_journal = 0;
    slots_rebuild(st);
}

int fl_store_check_table(const FlStore *st, const FlStoreEntry *table, int n_clients, const char *source)
{
    struct stat sb;
    if (st->fd >= 0 && fstat(st->fd, &sb) != 0) FH_FAIL(FH_ERR_IO, "%s: cannot stat: %s", st->path, strerror(errno));
    /* the slots a run can use (the bitmap's); a store read outside a run has none and checks the file alone */
    const int64_t max_slot = st->n_words > 0 ? st->n_words * 64 : INT64_MAX / 2 / (st->slot_bytes > 0 ? st->slot_bytes : 1);
    for (int k = 0; k < n_clients; k++) {
        const FlStoreEntry e = table[k];
        if (e.slot < -1 || e.slot >= max_slot || (e.slot >= 0 && e.round < 0))
            FH_FAIL(FH_ERR_IO, "%s: client %d's state entry (slot %lld, round %lld) is out of range", source, k,
                    (long long)e.slot, (long long)e.round);
        if (e.slot < 0 || st->slot_floats == 0) continue;
        const off_t end = slot_offset(st, e.slot) + SLOT_HEADER_BYTES + (off_t)st->slot_floats * (off_t)sizeof(float);
        SlotHeader h = { 0 };
        if (sb.st_size < end || io_all(0, st->fd, &h, sizeof h, slot_offset(st, e.slot), st->path, "a slot header") != FH_OK)
            FH_FAIL(FH_ERR_IO, "%s refers to client %d's state in slot %lld of %s, which the file (%lld bytes) does not "
                    "hold: a missing, truncated or replaced file", source, k, (long long)e.slot, st->path,
                    (long long)sb.st_size);
        if (!slot_holds(st, &h, k, e.round))
            FH_FAIL(FH_ERR_IO, "%s refers to client %d's state of round %lld in slot %lld of %s, which holds %s", source,
                    k, (long long)e.round + 1, (long long)e.slot, st->path,
                    h.magic == SLOT_MAGIC ? "another client's or another round's state" : "no state");
    }
    return FH_OK;
}

/* ---- reading a run's client state without running it (fedhet inspect) ---- */

int fl_store_export(const char *ckpt_path, const FlStoreEntry *table, int K, int64_t slot_floats, int64_t vectors,
                    int64_t n_state, const char *out_path)
{
    FhH5File out = { .id = H5I_INVALID_HID };
    float *row = NULL;
    const int64_t meta[2] = { slot_floats, vectors };
    hid_t g = H5I_INVALID_HID;
    FlStore st = { .fd = -1 };
    int status = FH_OK;
    if (slot_floats < 0 || vectors < 0 || n_state <= 0 || vectors * n_state > slot_floats)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: /clients has %lld vectors of %lld in %lld floats",
                                ckpt_path, (long long)vectors, (long long)n_state, (long long)slot_floats);
    if (status == FH_OK && slot_floats > 0) { /* the store beside the checkpoint */
        char dir[4096];
        const char *slash = strrchr(ckpt_path, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - ckpt_path) : 1, slash ? ckpt_path : ".");
        st = (FlStore){ .fd = -1, .n_clients = K, .slot_floats = slot_floats, .slot_bytes = slot_bytes_for(slot_floats) };
        snprintf(st.path, sizeof st.path, "%s/client-state.bin", dir);
        st.fd = open(st.path, O_RDONLY | O_CLOEXEC);
        if (st.fd < 0)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: cannot open: %s (%s keeps its clients' "
                                    "state there)", st.path, strerror(errno), ckpt_path);
        if (status == FH_OK) status = fl_store_check_table(&st, table, K, ckpt_path);
    }
    /* /clients/vector_<i> [K, n_state], /clients/floats [K, F], /clients/has_state [K, 1]: every client's row */
    const int n_vectors = (int)meta[1];
    const int64_t n_floats = meta[0] - meta[1] * n_state;
    if (status == FH_OK) status = fh_alloc_aligned(&row, (size_t)(meta[0] + 1) * sizeof *row, "a client's state");
    if (status == FH_OK) status = fh_h5_create(&out, out_path, FH_ERR_IO);
    hid_t sets[18];
    int n_sets = 0;
    if (status == FH_OK && n_vectors > 16)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %d client vectors", ckpt_path, n_vectors);
    if (status == FH_OK && (status = fh_h5_group(&out, "/clients", &g)) == FH_OK) H5Gclose(g);
    for (int i = 0; i <= n_vectors + 1 && status == FH_OK; i++) {
        char name[64];
        int64_t len = i < n_vectors ? n_state : i == n_vectors ? n_floats : 1;
        if (i == n_vectors && n_floats == 0) continue;
        if (i < n_vectors) snprintf(name, sizeof name, "/clients/vector_%d", i);
        else snprintf(name, sizeof name, i == n_vectors ? "/clients/floats" : "/clients/has_state");
        const hsize_t odims[2] = { (hsize_t)K, (hsize_t)len };
        FhH5Layout l = { 1, 0, 0 };
        status = fh_h5_create_dataset(&out, name, H5T_IEEE_F32LE, 2, odims, &l, &sets[n_sets]);
        if (status == FH_OK) n_sets++;
    }
    for (int k = 0; k < K && status == FH_OK; k++) {
        memset(row, 0, (size_t)(meta[0] + 1) * sizeof *row);
        if (table[k].slot >= 0 && meta[0] > 0)
            status = io_all(0, st.fd, row, (size_t)meta[0] * sizeof *row, slot_offset(&st, table[k].slot) + SLOT_HEADER_BYTES,
                            st.path, "a client's state");
        row[meta[0]] = table[k].slot >= 0 ? 1.0f : 0.0f;
        for (int i = 0, s = 0; i <= n_vectors + 1 && status == FH_OK; i++) {
            if (i == n_vectors && n_floats == 0) continue;
            const int64_t at = i <= n_vectors ? (int64_t)i * n_state : meta[0];
            status = fh_h5_write_rows(&out, sets[s++], "/clients", H5T_NATIVE_FLOAT, (hsize_t)k, 1, row + at);
        }
    }
    for (int i = 0; i < n_sets; i++) H5Dclose(sets[i]);
    if (out.id >= 0) {
        if (status == FH_OK) status = fh_h5_commit(&out);
        else fh_h5_discard(&out);
    }
    if (st.fd >= 0) close(st.fd);
    fh_free(&row);
    return status;
}
