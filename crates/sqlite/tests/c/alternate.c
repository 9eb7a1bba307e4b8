/* Two processes alternate writes to one database, each on its own VFS,
 * and each checks that it reads the other's latest values: the
 * cross-process coherence of the pcache VFS.
 *
 *   alternate DB EXTENSION MODE VFS_A VFS_B ROUNDS
 *
 * MODE is delete or wal; VFS_A and VFS_B are pcache or default. The parent
 * creates the database (default VFS), then forks: A takes the even rounds,
 * B the odd ones, passing a token through pipes. In its round a process
 * first checks the sums the other reported after its commit, then updates
 * every seventh row (many pages), appends a row of 3000 bytes (the file
 * grows), commits, and reports its new sums. Exit status 0 when every check
 * held and both integrity checks passed. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *who = "parent";

static void die(const char *what, const char *msg) {
    fprintf(stderr, "%s: %s: %s\n", who, what, msg);
    exit(1);
}

static void exec(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        die(sql, err ? err : sqlite3_errmsg(db));
}

static long long one(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        die(sql, sqlite3_errmsg(db));
    if (sqlite3_step(st) != SQLITE_ROW)
        die(sql, sqlite3_errmsg(db));
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void check_integrity(sqlite3 *db) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK)
        die("integrity_check", sqlite3_errmsg(db));
    if (sqlite3_step(st) != SQLITE_ROW)
        die("integrity_check", sqlite3_errmsg(db));
    const char *r = (const char *)sqlite3_column_text(st, 0);
    if (!r || strcmp(r, "ok") != 0)
        die("integrity_check", r ? r : "(null)");
    sqlite3_finalize(st);
}

static sqlite3 *open_db(const char *path, const char *ext, const char *vfs) {
    sqlite3 *db;
    if (strcmp(vfs, "pcache") == 0) {
        sqlite3 *mem;
        char *err = NULL;
        if (sqlite3_open(":memory:", &mem) != SQLITE_OK)
            die("open :memory:", sqlite3_errmsg(mem));
        sqlite3_enable_load_extension(mem, 1);
        if (sqlite3_load_extension(mem, ext, NULL, &err) != SQLITE_OK)
            die("load_extension", err ? err : "?");
        sqlite3_close(mem); /* the VFS stays: SQLITE_OK_LOAD_PERMANENTLY */
        char uri[4096];
        snprintf(uri, sizeof uri, "file:%s?vfs=pcache&pcache_mem=8M", path);
        if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, NULL) != SQLITE_OK)
            die("open pcache", sqlite3_errmsg(db));
    } else if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        die("open", sqlite3_errmsg(db));
    }
    sqlite3_busy_timeout(db, 10000);
    /* A small SQLite cache: reads go to the VFS. */
    exec(db, "PRAGMA cache_size=16; PRAGMA wal_autocheckpoint=40");
    return db;
}

static const char *SUMS = "SELECT (SELECT total(v) FROM t) * 1000003 + (SELECT count(*) FROM t)"
                          " + (SELECT total(length(pad)) FROM t)";

static void run(const char *path, const char *ext, const char *vfs, int first, int rounds, int in, int out) {
    sqlite3 *db = open_db(path, ext, vfs);
    char sql[256];
    for (int r = first; r < rounds; r += 2) {
        long long expect = 0;
        if (r > 0) {
            if (read(in, &expect, sizeof expect) != sizeof expect)
                die("read token", "the other process is gone");
            long long got = one(db, SUMS);
            if (got != expect) {
                char msg[128];
                snprintf(msg, sizeof msg, "round %d: read %lld, the other wrote %lld", r, got, expect);
                die("stale read", msg);
            }
        }
        exec(db, "BEGIN IMMEDIATE");
        snprintf(sql, sizeof sql, "UPDATE t SET v = v + %d WHERE k %% 7 = %d", r + 1, r % 7);
        exec(db, sql);
        snprintf(sql, sizeof sql, "INSERT INTO t(v, pad) VALUES (%d, randomblob(3000))", r);
        exec(db, sql);
        exec(db, "COMMIT");
        long long now = one(db, SUMS);
        if (write(out, &now, sizeof now) != sizeof now)
            die("write token", "the other process is gone");
    }
    /* The last token: the other's final round. */
    long long expect;
    if (read(in, &expect, sizeof expect) == sizeof expect && one(db, SUMS) != expect)
        die("stale read", "after the last round");
    check_integrity(db);
    sqlite3_close(db);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: alternate DB EXTENSION MODE VFS_A VFS_B ROUNDS\n");
        return 2;
    }
    const char *path = argv[1], *ext = argv[2], *mode = argv[3];
    int rounds = atoi(argv[6]);
    sqlite3 *db;
    unlink(path);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die("create", sqlite3_errmsg(db));
    exec(db, strcmp(mode, "wal") == 0 ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
    exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v INTEGER, pad BLOB);"
             "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 4000)"
             " INSERT INTO t SELECT i, i, randomblob(400) FROM c");
    sqlite3_close(db);
    int a2b[2], b2a[2];
    if (pipe(a2b) || pipe(b2a))
        die("pipe", "failed");
    pid_t pid = fork();
    if (pid < 0)
        die("fork", "failed");
    if (pid == 0) {
        who = "B";
        close(a2b[1]);
        close(b2a[0]);
        run(path, ext, argv[5], 1, rounds, a2b[0], b2a[1]);
        close(b2a[1]);
        return 0;
    }
    who = "A";
    close(a2b[0]);
    close(b2a[1]);
    run(path, ext, argv[4], 0, rounds, b2a[0], a2b[1]);
    close(a2b[1]);
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("B", "failed");
    printf("%s %s/%s: %d rounds, every read saw the other's last commit\n", mode, argv[4], argv[5], rounds);
    return 0;
}
