/* The C ABI's tests: data through a small cache under memory pressure, and
 * every bad input's errno. Plain C with asserts (never compiled out: NDEBUG
 * is undefined below).
 *
 *     test_capi DIR [quick]
 *
 * DIR is an empty directory for the test's files; "quick" shrinks the data
 * (under valgrind). Prints one line per test and "N passed, 0 failed". Run by
 * tests/c_suite.rs, which builds it against libpcache.so, against
 * libpcache.a under AddressSanitizer, and runs it under valgrind. */
#undef NDEBUG
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pcache.h"

static const char *dir;
static int quick;
static int passed;
/* The full-disk test's tmpfs, mounted in a private mount namespace before
 * the first cache starts a thread (unshare needs a single thread), or NULL
 * with the reason in no_tmpfs. */
static char tmpfs[4096];
static const char *no_tmpfs;

static char *path_of(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

#define PASS(name) (passed++, printf("ok %s\n", name), fflush(stdout))

/* The word at byte offset off of the test pattern (off a multiple of 8). */
static uint64_t pattern(uint64_t off, uint64_t seed) {
    uint64_t z = off * 0x9E3779B97F4A7C15ull + seed;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 29);
}

static void fill(unsigned char *buf, size_t len, uint64_t off, uint64_t seed) {
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = pattern(off + i, seed);
        memcpy(buf + i, &w, 8);
    }
}

/* A counter of the vmstat text, or -1. */
static long long vmstat_get(pcache_t *c, const char *name) {
    char *text = pcache_vmstat(c);
    assert(text);
    long long v = -1;
    size_t n = strlen(name);
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, n) == 0 && line[n] == ' ') {
            v = atoll(line + n + 1);
            break;
        }
    }
    pcache_string_free(text);
    return v;
}

/* A file many times the cache's size, written and read back: every byte
 * checked, in sequential and scattered reads, across a close and reopen. */
static void test_roundtrip_under_pressure(void) {
    const uint64_t mem = quick ? (256 << 10) : (4 << 20);
    const uint64_t size = quick ? (4 << 20) : (64 << 20);
    const size_t chunk = 48 << 10; /* not a page multiple: writes straddle pages */
    int err = 1;
    pcache_t *c = pcache_new(mem, &err);
    assert(c && err == 0);
    assert(pcache_page_size(c) == 4096);
    pcache_file_t *f = pcache_open(c, path_of("big"), O_CREAT | O_RDWR | O_TRUNC, &err);
    assert(f && err == 0);
    unsigned char *buf = malloc(chunk), *got = malloc(chunk);
    assert(buf && got);
    for (uint64_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? (size_t)(size - off) : chunk;
        fill(buf, n, off, 1);
        assert(pcache_pwrite(f, buf, n, off) == (ssize_t)n);
    }
    assert(pcache_size(f) == (int64_t)size);
    assert(pcache_fsync(f) == 0);
    for (uint64_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? (size_t)(size - off) : chunk;
        fill(buf, n, off, 1);
        memset(got, 0xAA, n);
        assert(pcache_pread(f, got, n, off) == (ssize_t)n);
        assert(memcmp(buf, got, n) == 0);
    }
    /* Reclaim ran: the file did not fit. */
    assert(vmstat_get(c, "pgsteal_kswapd") + vmstat_get(c, "pgsteal_direct") > 0);
    assert(pcache_close(f) == 0);

    /* Overwrite scattered ranges through a new handle, then check all. */
    f = pcache_open(c, path_of("big"), O_RDWR, &err);
    assert(f && err == 0);
    srand(7);
    for (int i = 0; i < 200; i++) {
        uint64_t off = ((uint64_t)rand() % (size / 8)) * 8;
        size_t n = 8 * (1 + (size_t)rand() % 1024);
        if (off + n > size)
            n = (size_t)(size - off);
        fill(buf, n, off, 2);
        assert(pcache_pwrite(f, buf, n, off) == (ssize_t)n);
        memset(got, 0, n);
        assert(pcache_pread(f, got, n, off) == (ssize_t)n);
        assert(memcmp(buf, got, n) == 0);
    }
    /* Reads past the end are short, then empty. */
    assert(pcache_pread(f, got, 100, size - 40) == 40);
    assert(pcache_pread(f, got, 100, size) == 0);
    assert(pcache_pread(f, got, 100, size + 4096) == 0);
    assert(pcache_fadvise(f, 0, 0, POSIX_FADV_DONTNEED) == 0);
    assert(pcache_close(f) == 0);
    assert(pcache_shutdown(c) == 0);
    pcache_free(c);

    /* What the host file holds is what was written (it outlived the cache). */
    c = pcache_new(mem, &err);
    assert(c);
    f = pcache_open(c, path_of("big"), O_RDONLY, &err);
    assert(f && err == 0);
    assert(pcache_size(f) == (int64_t)size);
    fill(buf, 4096, size - 4096, 2);
    fill(buf, 4096, size - 4096, 1);
    assert(pcache_pread(f, got, 4096, size - 4096) == 4096);
    /* The last page: pattern 1 where the scattered writes did not land. */
    assert(memcmp(buf, got, 8) == 0 || memcmp((fill(buf, 8, size - 4096, 2), buf), got, 8) == 0);
    free(buf);
    free(got);
    pcache_free(c); /* with f still open: closed by the free */
    PASS("roundtrip_under_pressure");
}

static void test_open_errors(void) {
    int err = 0;
    assert(pcache_new(0, &err) == NULL && err == -EINVAL);
    assert(pcache_new(4096, NULL) == NULL); /* err may be NULL */
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    assert(pcache_open(NULL, path_of("x"), O_RDWR | O_CREAT, &err) == NULL && err == -EINVAL);
    assert(pcache_open(c, NULL, O_RDWR | O_CREAT, &err) == NULL && err == -EFAULT);
    assert(pcache_open(c, path_of("x"), O_RDWR | O_CREAT | O_APPEND, &err) == NULL && err == -EINVAL);
    assert(pcache_open(c, path_of("x"), O_RDWR | O_CREAT | O_CLOEXEC, &err) == NULL && err == -EINVAL);
    assert(pcache_open(c, path_of("x"), O_ACCMODE, &err) == NULL && err == -EINVAL);
    assert(pcache_open(c, path_of("missing"), O_RDWR, &err) == NULL && err == -ENOENT);
    assert(pcache_open(c, path_of("nodir/x"), O_RDWR | O_CREAT, &err) == NULL && err == -ENOENT);
    assert(pcache_open(c, dir, O_RDONLY, &err) == NULL && err == -EISDIR);
    pcache_file_t *f = pcache_open(c, path_of("excl"), O_RDWR | O_CREAT | O_EXCL, &err);
    assert(f && err == 0);
    assert(pcache_open(c, path_of("excl"), O_RDWR | O_CREAT | O_EXCL, &err) == NULL && err == -EEXIST);
    assert(pcache_pwrite(f, "abc", 3, 0) == 3);
    assert(pcache_close(f) == 0);
    /* O_TRUNC empties it. */
    f = pcache_open(c, path_of("excl"), O_RDWR | O_TRUNC, &err);
    assert(f && pcache_size(f) == 0);
    assert(pcache_close(f) == 0);
    /* After a shutdown, writes are refused. */
    f = pcache_open(c, path_of("excl"), O_RDWR, &err);
    assert(f);
    assert(pcache_shutdown(c) == 0);
    assert(pcache_pwrite(f, "abc", 3, 0) == -ESHUTDOWN);
    pcache_free(c);
    pcache_free(NULL);
    assert(pcache_shutdown(NULL) == -EINVAL);
    PASS("open_errors");
}

static void test_io_errors(void) {
    int err = 0;
    char buf[16] = "0123456789abcdef";
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    pcache_file_t *f = pcache_open(c, path_of("io"), O_RDWR | O_CREAT, &err);
    assert(f);
    /* NULL handles and buffers. */
    assert(pcache_pread(NULL, buf, 4, 0) == -EINVAL);
    assert(pcache_pwrite(NULL, buf, 4, 0) == -EINVAL);
    assert(pcache_fsync(NULL) == -EINVAL);
    assert(pcache_ftruncate(NULL, 0) == -EINVAL);
    assert(pcache_size(NULL) == -EINVAL);
    assert(pcache_fadvise(NULL, 0, 0, POSIX_FADV_NORMAL) == -EINVAL);
    assert(pcache_close(NULL) == -EINVAL);
    assert(pcache_pread(f, NULL, 4, 0) == -EFAULT);
    assert(pcache_pwrite(f, NULL, 4, 0) == -EFAULT);
    assert(pcache_pwrite(f, NULL, 0, 0) == 0);
    /* Negative sizes (as ssize_t), offsets (as off_t), ends past INT64_MAX. */
    assert(pcache_pread(f, buf, (size_t)-1, 0) == -EINVAL);
    assert(pcache_pwrite(f, buf, (size_t)-16, 0) == -EINVAL);
    assert(pcache_pwrite(f, buf, 4, (uint64_t)-1) == -EINVAL);
    assert(pcache_pread(f, buf, 4, (uint64_t)INT64_MAX + 1) == -EINVAL);
    assert(pcache_pwrite(f, buf, 16, (uint64_t)INT64_MAX - 8) == -EINVAL);
    assert(pcache_pread(f, buf, 16, (uint64_t)INT64_MAX - 8) == -EINVAL);
    /* Past the largest file size: EFBIG for writes, end of file for reads. */
    assert(pcache_pwrite(f, buf, 4, (uint64_t)INT64_MAX - 8) == -EFBIG);
    assert(pcache_pwrite(f, buf, 4, (uint64_t)1 << 60) == -EFBIG);
    assert(pcache_pread(f, buf, 4, (uint64_t)INT64_MAX - 8) == 0);
    assert(pcache_size(f) == 0);
    /* ftruncate. */
    assert(pcache_ftruncate(f, (uint64_t)-1) == -EINVAL);
    assert(pcache_ftruncate(f, (uint64_t)INT64_MAX) == -EFBIG);
    assert(pcache_ftruncate(f, 10000) == 0 && pcache_size(f) == 10000);
    assert(pcache_pread(f, buf, 16, 9000) == 16 && buf[0] == 0 && buf[15] == 0);
    assert(pcache_ftruncate(f, 5) == 0 && pcache_size(f) == 5);
    /* fadvise. */
    assert(pcache_fadvise(f, 0, 0, 42) == -EINVAL);
    assert(pcache_fadvise(f, (uint64_t)-1, 0, POSIX_FADV_NORMAL) == -EINVAL);
    assert(pcache_fadvise(f, 0, (uint64_t)-1, POSIX_FADV_NORMAL) == -EINVAL);
    assert(pcache_fadvise(f, 1, (uint64_t)INT64_MAX, POSIX_FADV_DONTNEED) == 0); /* to the end */
    assert(pcache_fadvise(f, 0, 0, POSIX_FADV_SEQUENTIAL) == 0);
    assert(pcache_fadvise(f, 0, 4096, POSIX_FADV_WILLNEED) == 0);
    assert(pcache_fadvise(f, 0, 0, POSIX_FADV_RANDOM) == 0);
    assert(pcache_fadvise(f, 0, 0, POSIX_FADV_NOREUSE) == 0);
    assert(pcache_close(f) == 0);

    /* Access modes. */
    pcache_file_t *ro = pcache_open(c, path_of("io"), O_RDONLY, &err);
    assert(ro);
    assert(pcache_pwrite(ro, buf, 4, 0) == -EBADF);
    assert(pcache_ftruncate(ro, 0) == -EINVAL);
    assert(pcache_pread(ro, buf, 16, 0) == 5);
    assert(pcache_fsync(ro) == 0);
    assert(pcache_get_page_mut(ro, 0, &err) == NULL && err == -EBADF);
    assert(pcache_map(ro, 0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, &err) == NULL && err == -EACCES);
    pcache_map_t *m = pcache_map(ro, 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, &err);
    assert(m && err == 0); /* a private writable mapping of a read-only file */
    assert(pcache_unmap(m) == 0);
    assert(pcache_close(ro) == 0);
    pcache_file_t *wo = pcache_open(c, path_of("io"), O_WRONLY, &err);
    assert(wo);
    assert(pcache_pread(wo, buf, 4, 0) == -EBADF);
    assert(pcache_find_page(wo, 0, &err) == NULL && err == -EBADF);
    assert(pcache_map(wo, 0, 4096, PROT_READ, MAP_SHARED, &err) == NULL && err == -EACCES);
    assert(pcache_pwrite(wo, "xy", 2, 0) == 2);
    assert(pcache_close(wo) == 0);
    pcache_free(c);
    PASS("io_errors");
}

/* A closed handle gives EBADF, never undefined behaviour, however many
 * files are opened and closed after it (up to the quarantine of 1024). */
static void test_closed_handle(void) {
    int err = 0;
    char buf[8];
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    pcache_file_t *f = pcache_open(c, path_of("closed"), O_RDWR | O_CREAT, &err);
    assert(f);
    assert(pcache_pwrite(f, "12345678", 8, 0) == 8);
    assert(pcache_close(f) == 0);
    assert(pcache_close(f) == -EBADF);
    for (int i = 0; i < 300; i++) {
        pcache_file_t *g = pcache_open(c, path_of("closed"), O_RDWR, &err);
        assert(g && g != f);
        assert(pcache_close(g) == 0);
    }
    assert(pcache_pread(f, buf, 8, 0) == -EBADF);
    assert(pcache_pwrite(f, buf, 8, 0) == -EBADF);
    assert(pcache_fsync(f) == -EBADF);
    assert(pcache_ftruncate(f, 0) == -EBADF);
    assert(pcache_size(f) == -EBADF);
    assert(pcache_fadvise(f, 0, 0, POSIX_FADV_NORMAL) == -EBADF);
    assert(pcache_find_page(f, 0, &err) == NULL && err == -EBADF);
    assert(pcache_get_page(f, 0, &err) == NULL && err == -EBADF);
    assert(pcache_get_page_mut(f, 0, &err) == NULL && err == -EBADF);
    assert(pcache_map(f, 0, 4096, PROT_READ, MAP_SHARED, &err) == NULL && err == -EBADF);
    /* Past the quarantine, closed handles are reused: memory stays bounded
     * by the handles open at once plus 1024. */
    int reused = 0;
    for (int i = 0; i < 1100 && !reused; i++) {
        pcache_file_t *g = pcache_open(c, path_of("closed"), O_RDWR, &err);
        assert(g);
        reused = g == f;
        assert(pcache_close(g) == 0);
    }
    assert(reused);
    pcache_free(c);
    PASS("closed_handle");
}

static void test_sysctl_vmstat(void) {
    int err = 0;
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    assert(pcache_sysctl_set(c, "dirty_ratio", "30") == 0);
    assert(pcache_sysctl_set(c, "read_ahead_kb", "64") == 0);
    assert(pcache_sysctl_set(c, "no_such_knob", "1") == -ENOENT);
    assert(pcache_sysctl_set(c, "dirty_ratio", "lots") == -EINVAL);
    assert(pcache_sysctl_set(c, NULL, "1") == -EFAULT);
    assert(pcache_sysctl_set(c, "dirty_ratio", NULL) == -EFAULT);
    assert(pcache_sysctl_set(NULL, "dirty_ratio", "30") == -EINVAL);
    assert(pcache_sysctl_set(c, "dirty_ratio", "\xff") == -EINVAL);
    assert(vmstat_get(c, "nr_free_pages") > 0);
    assert(pcache_vmstat(NULL) == NULL);
    char *unwritten = pcache_unwritten(c);
    assert(unwritten && unwritten[0] == 0);
    pcache_string_free(unwritten);
    pcache_file_t *f = pcache_open(c, path_of("dirty"), O_RDWR | O_CREAT | O_TRUNC, &err);
    assert(f && pcache_pwrite(f, "dirty", 5, 0) == 5);
    unwritten = pcache_unwritten(c);
    assert(unwritten && strstr(unwritten, "dirty 1 0\n"));
    pcache_string_free(unwritten);
    assert(pcache_fsync(f) == 0 && pcache_close(f) == 0);
    unwritten = pcache_unwritten(c);
    assert(unwritten && unwritten[0] == 0);
    pcache_string_free(unwritten);
    assert(pcache_unwritten(NULL) == NULL);
    pcache_string_free(NULL);
    pcache_free(c);
    PASS("sysctl_vmstat");
}

struct put_arg {
    pcache_page_mut_t *pin;
    int ret;
};

static void *put_elsewhere(void *p) {
    struct put_arg *a = p;
    a->ret = pcache_page_mut_put(a->pin);
    return NULL;
}

static void test_pins(void) {
    int err = 0;
    char buf[16];
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    pcache_file_t *f = pcache_open(c, path_of("pins"), O_RDWR | O_CREAT | O_TRUNC, &err);
    assert(f);
    assert(pcache_pwrite(f, "hello", 5, 0) == 5);

    /* A read pin's copy. */
    pcache_page_t *p = pcache_find_page(f, 0, &err);
    assert(p && err == 0);
    assert(pcache_page_len(p) == 4096);
    assert(memcmp(pcache_page_data(p), "hello", 5) == 0);
    pcache_page_put(p);
    assert(pcache_find_page(f, 9, &err) == NULL && err == -ENODATA);
    assert(pcache_find_page(NULL, 0, &err) == NULL && err == -EINVAL);
    assert(pcache_get_page(f, 1, &err) == NULL && err == -EINVAL); /* past EOF */
    p = pcache_get_page(f, 0, NULL);
    assert(p && memcmp(pcache_page_data(p), "hello", 5) == 0);
    pcache_page_put(p);
    pcache_page_put(NULL);
    assert(pcache_page_data(NULL) == NULL && pcache_page_len(NULL) == 0);

    /* A write pin: the copy changed, the file grown at the put. */
    pcache_page_mut_t *w = pcache_get_page_mut(f, 1, &err);
    assert(w && err == 0);
    assert(pcache_page_mut_len(w) == 4096);
    memcpy(pcache_page_mut_data(w), "world", 5);
    assert(pcache_page_mut_extend_to(w, 4096 + 5) == 0);
    assert(pcache_page_mut_extend_to(w, 3 * 4096) == -EINVAL);
    /* Calls that would wait for the pinned page's lock refuse. */
    assert(pcache_pwrite(f, "x", 1, 0) == -EDEADLK);
    assert(pcache_pread(f, buf, 1, 0) == -EDEADLK);
    assert(pcache_fsync(f) == -EDEADLK);
    assert(pcache_ftruncate(f, 0) == -EDEADLK);
    assert(pcache_get_page_mut(f, 0, &err) == NULL && err == -EDEADLK);
    assert(pcache_get_page(f, 0, &err) == NULL && err == -EDEADLK);
    assert(pcache_fadvise(f, 0, 0, POSIX_FADV_DONTNEED) == -EDEADLK);
    /* find_page does not wait: it sees the page as it was. */
    p = pcache_find_page(f, 1, &err);
    assert(p && ((const char *)pcache_page_data(p))[0] == 0);
    pcache_page_put(p);
    /* Only the pinning thread may put the pin. */
    struct put_arg a = {w, 0};
    pthread_t t;
    assert(pthread_create(&t, NULL, put_elsewhere, &a) == 0);
    assert(pthread_join(t, NULL) == 0);
    assert(a.ret == -EPERM);
    assert(pcache_page_mut_put(w) == 0);
    assert(pcache_page_mut_put(NULL) == -EINVAL);
    assert(pcache_size(f) == 4096 + 5);
    assert(pcache_pread(f, buf, 5, 4096) == 5 && memcmp(buf, "world", 5) == 0);

    /* A pin past EOF without extend_to: the bytes are not part of the file. */
    w = pcache_get_page_mut(f, 5, &err);
    assert(w);
    memset(pcache_page_mut_data(w), 'z', 100);
    assert(pcache_page_mut_put(w) == 0);
    assert(pcache_size(f) == 4096 + 5);
    /* An unchanged pin writes nothing. */
    w = pcache_get_page_mut(f, 0, &err);
    assert(w && memcmp(pcache_page_mut_data(w), "hello", 5) == 0);
    assert(pcache_page_mut_put(w) == 0);
    assert(pcache_get_page_mut(f, (uint64_t)1 << 52, &err) == NULL && err == -EFBIG);
    assert(pcache_close(f) == 0);
    pcache_free(c);
    PASS("pins");
}

static void test_mappings(void) {
    int err = 0;
    char buf[16];
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    pcache_file_t *f = pcache_open(c, path_of("map"), O_RDWR | O_CREAT | O_TRUNC, &err);
    assert(f);
    uint64_t words[512];
    for (int i = 0; i < 512; i++)
        words[i] = pattern((uint64_t)i * 8, 3);
    for (int pg = 0; pg < 8; pg++)
        assert(pcache_pwrite(f, words, sizeof words, (uint64_t)pg * 4096) == 4096);

    assert(pcache_map(f, 1, 4096, PROT_READ, MAP_SHARED, &err) == NULL && err == -EINVAL);
    assert(pcache_map(f, 0, 0, PROT_READ, MAP_SHARED, &err) == NULL && err == -EINVAL);
    assert(pcache_map(f, 0, 4096, PROT_READ, MAP_SHARED | MAP_PRIVATE, &err) == NULL && err == -EINVAL);
    assert(pcache_map(f, 0, 4096, PROT_NONE, MAP_SHARED, &err) == NULL && err == -EINVAL);
    assert(pcache_map(f, (uint64_t)-4096, 4096, PROT_READ, MAP_SHARED, &err) == NULL && err == -EINVAL);
    assert(pcache_map(NULL, 0, 4096, PROT_READ, MAP_SHARED, &err) == NULL && err == -EINVAL);

    /* Ten pages over an eight-page file. */
    pcache_map_t *m = pcache_map(f, 0, 10 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, &err);
    assert(m && err == 0);
    uint64_t w = 0;
    for (uint64_t pg = 0; pg < 8; pg++)
        for (size_t off = 0; off < 4096; off += 512) {
            assert(pcache_map_load_u64(m, pg, off, &w) == 0);
            assert(w == words[off / 8]);
        }
    assert(pcache_map_load_u64(m, 0, 4, &w) == -EINVAL);    /* unaligned */
    assert(pcache_map_load_u64(m, 10, 0, &w) == -EINVAL);   /* past the mapping */
    assert(pcache_map_load_u64(m, 8, 0, &w) == -EINVAL);    /* past EOF: the kernel's SIGBUS */
    assert(pcache_map_load_u64(m, 0, 0, NULL) == -EFAULT);
    assert(pcache_map_load_u64(NULL, 0, 0, &w) == -EINVAL);
    /* Writes through the mapping reach the file. */
    assert(pcache_map_write(m, 4096 + 8, "mapped!", 7) == 0);
    assert(pcache_pread(f, buf, 7, 4096 + 8) == 7 && memcmp(buf, "mapped!", 7) == 0);
    assert(pcache_map_read(m, 4096 + 8, buf, 7) == 0 && memcmp(buf, "mapped!", 7) == 0);
    assert(pcache_map_write(m, 8 * 4096, "x", 1) == -EINVAL); /* never grows the file */
    assert(pcache_map_write(m, 0, NULL, 1) == -EFAULT);
    assert(pcache_map_read(m, 0, NULL, 1) == -EFAULT);
    assert(pcache_map_read(m, 0, buf, (size_t)-1) == -EINVAL);
    assert(pcache_map_msync(m, 0, 8 * 4096) == 0);
    /* A write pin of the file: mapping accesses refuse rather than hang. */
    pcache_page_mut_t *pin = pcache_get_page_mut(f, 2, &err);
    assert(pin);
    assert(pcache_map_load_u64(m, 2, 0, &w) == -EDEADLK);
    assert(pcache_page_mut_put(pin) == 0);
    /* The mapping outlives the handle, as mmap(2) after close(2). */
    assert(pcache_close(f) == 0);
    assert(pcache_map_load_u64(m, 7, 8, &w) == 0 && w == words[1]);
    assert(pcache_unmap(m) == 0);
    assert(pcache_unmap(NULL) == -EINVAL);

    /* A read-only mapping refuses writes. */
    f = pcache_open(c, path_of("map"), O_RDONLY, &err);
    assert(f);
    m = pcache_map(f, 4096, 4096, PROT_READ, MAP_SHARED, &err);
    assert(m);
    assert(pcache_map_write(m, 0, "x", 1) == -EACCES);
    assert(pcache_map_load_u64(m, 0, 0, &w) == 0 && memcmp(&w, "\0\0\0\0\0\0\0\0", 8) != 0);
    assert(pcache_unmap(m) == 0);
    assert(pcache_close(f) == 0);
    pcache_free(c);
    PASS("mappings");
}

struct racer {
    pcache_file_t *f;
    int id;
    int ok, badf;
};

static void *race_io(void *p) {
    struct racer *r = p;
    char buf[512];
    memset(buf, 'a' + r->id, sizeof buf);
    for (int i = 0; i < (quick ? 200 : 5000); i++) {
        ssize_t n = (i & 1) ? pcache_pwrite(r->f, buf, sizeof buf, (uint64_t)(r->id * 8192 + (i % 16) * 512))
                            : pcache_pread(r->f, buf, sizeof buf, (uint64_t)(i % 64) * 512);
        if (n >= 0)
            r->ok++;
        else {
            assert(n == -EBADF);
            r->badf++;
        }
    }
    return NULL;
}

/* Threads reading and writing through one handle while another closes it:
 * each call either runs or returns -EBADF. */
static void test_close_races_io(void) {
    int err = 0;
    pcache_t *c = pcache_new(1 << 20, &err);
    assert(c);
    pcache_file_t *f = pcache_open(c, path_of("race"), O_RDWR | O_CREAT | O_TRUNC, &err);
    assert(f);
    struct racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){f, i, 0, 0};
        assert(pthread_create(&t[i], NULL, race_io, &r[i]) == 0);
    }
    usleep(2000);
    int rc = pcache_close(f);
    assert(rc == 0 || rc == -EIO);
    int badf = 0;
    for (int i = 0; i < 4; i++) {
        assert(pthread_join(t[i], NULL) == 0);
        badf += r[i].badf;
    }
    assert(pcache_close(f) == -EBADF);
    printf("   close during I/O: %d calls after the close returned -EBADF\n", badf);
    pcache_free(c);
    PASS("close_races_io");
}

/* Before any thread: a private mount namespace with a 1 MiB tmpfs, so the
 * mount goes when the process does. Needs root (CAP_SYS_ADMIN). */
static void setup_tmpfs(void) {
    if (geteuid() != 0) {
        no_tmpfs = "not root";
        return;
    }
    if (unshare(CLONE_NEWNS) != 0) {
        no_tmpfs = "unshare(CLONE_NEWNS) refused";
        return;
    }
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0) {
        no_tmpfs = "could not make / private";
        return;
    }
    snprintf(tmpfs, sizeof tmpfs, "%s/tmpfs", dir);
    if (mkdir(tmpfs, 0700) != 0 || mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m") != 0) {
        no_tmpfs = "mount -t tmpfs refused";
        tmpfs[0] = 0;
    }
}

/* A full disk: writes fail with ENOSPC at the call, before any page is
 * dirtied, so nothing is lost at shutdown. */
static void test_full_disk(void) {
    if (!tmpfs[0]) {
        printf("skip full_disk: %s\n", no_tmpfs);
        return;
    }
    int err = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/full", tmpfs);
    pcache_t *c = pcache_new(4 << 20, &err);
    assert(c);
    pcache_file_t *f = pcache_open(c, path, O_RDWR | O_CREAT, &err);
    assert(f);
    static unsigned char chunk[64 << 10];
    memset(chunk, 'd', sizeof chunk);
    uint64_t off = 0;
    ssize_t r = 0;
    while (off < (4 << 20)) {
        r = pcache_pwrite(f, chunk, sizeof chunk, off);
        if (r < 0)
            break;
        off += (uint64_t)r;
        if ((size_t)r < sizeof chunk) {
            r = pcache_pwrite(f, chunk, sizeof chunk, off);
            break;
        }
    }
    assert(r == -ENOSPC);
    assert(off > 0 && off <= (1 << 20));
    assert(pcache_fsync(f) == 0);
    assert(pcache_size(f) == (int64_t)off);
    assert(pcache_close(f) == 0);
    assert(pcache_shutdown(c) == 0);
    pcache_free(c);
    struct stat st;
    assert(stat(path, &st) == 0 && st.st_size == (off_t)off);
    PASS("full_disk");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [quick]\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    setup_tmpfs();
    test_open_errors();
    test_io_errors();
    test_closed_handle();
    test_close_races_io();
    test_sysctl_vmstat();
    test_pins();
    test_mappings();
    test_full_disk();
    test_roundtrip_under_pressure();
    if (tmpfs[0])
        umount2(tmpfs, MNT_DETACH);
    printf("%d passed, 0 failed\n", passed);
    return 0;
}
