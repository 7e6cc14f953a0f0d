/* The launcher inside bubblewrap, in C: what `exec.py` does, without starting a Python interpreter
 * (10-40 ms per command). Same command line as exec.py, except --seccomp: bubblewrap itself installs the
 * filter (`--seccomp FD`) before it executes this program.
 *
 *     exec-helper [--cwd DEV:INO] [--bound MODE:DEV:INO:PATH]... [--limit RES:VAL]... [--user UID:GID:G1,G2]
 *                 [--mkdir PATH] [--read|--write|--device|--list PATH]... [--net 0|1] [--abi N]
 *                 [--read-fd|--write-fd FD]... [--filter FD] -- EXECUTABLE ARGV0 ARGS...
 *
 * --read-fd/--write-fd FD: a rule for a handle the server holds and passed (Landlock alone: a root, a work
 * area), never reopened by path; --filter FD: a pipe holding a seccomp program, installed
 * right before the command is executed (under bubblewrap, bubblewrap installs it instead).
 *
 * Built by the server from this file (`helper.py`) and handed to bubblewrap as bytes (`--file`), so no file
 * on disk is trusted afterwards. Under Landlock alone the server executes it from a sealed in-memory copy, with
 * the limits, the user, the Landlock rules (--abi, --read, --write, --read-fd, ...) and --filter. Any failure: a message on stderr, exit 126, and nothing is run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

#define MAX_ITEMS 512
#define CAP_VERSION_3 0x20080522
#define SYS_CREATE_RULESET 444
#define SYS_ADD_RULE 445
#define SYS_RESTRICT_SELF 446

/* Landlock rights (include/uapi/linux/landlock.h); the same sets as landlock.py. */
#define LL_EXECUTE (1ULL << 0)
#define LL_WRITE_FILE (1ULL << 1)
#define LL_READ_FILE (1ULL << 2)
#define LL_READ_DIR (1ULL << 3)
#define LL_REMOVE_DIR (1ULL << 4)
#define LL_REMOVE_FILE (1ULL << 5)
#define LL_MAKE_DIR (1ULL << 7)
#define LL_MAKE_REG (1ULL << 8)
#define LL_MAKE_SOCK (1ULL << 9)
#define LL_MAKE_FIFO (1ULL << 10)
#define LL_MAKE_SYM (1ULL << 12)
#define LL_REFER (1ULL << 13)
#define LL_TRUNCATE (1ULL << 14)
#define LL_IOCTL_DEV (1ULL << 15)
#define FS_READ (LL_EXECUTE | LL_READ_FILE | LL_READ_DIR)
#define FS_WRITE (FS_READ | LL_WRITE_FILE | LL_REMOVE_DIR | LL_REMOVE_FILE | LL_MAKE_DIR | LL_MAKE_REG | \
                  LL_MAKE_SOCK | LL_MAKE_FIFO | LL_MAKE_SYM | LL_REFER | LL_TRUNCATE)
#define FS_DEVICE (LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE)
#define FILE_RIGHTS (LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV)

static const char MOVED[] = "a root or a protected path changed while the sandbox was being built (renamed, or "
                            "replaced by a symbolic link), so it could not be confined as checked; nothing was run. "
                            "Try again";

struct ruleset_attr { uint64_t fs, net, scoped; };
struct path_beneath { uint64_t allowed; int32_t fd; } __attribute__((packed));
struct cap_header { uint32_t version; int pid; };
struct cap_data { uint32_t effective, permitted, inheritable; };

__attribute__((noreturn)) static void fail_code(int code, const char *message) {
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "rootbound sandbox: %s\n", message);
    if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    _exit(code);
}

__attribute__((noreturn)) static void fail(const char *message) { fail_code(126, message); }

/* Never run the command half-confined: a failed call ends everything. */
static void confine_error(const char *what) {
    char buf[1024];
    snprintf(buf, sizeof buf, "cannot confine the command: %s: %s", what, strerror(errno));
    fail(buf);
}

static unsigned long long number(const char *text, const char *what) {
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno || end == text || (*end && *end != ':' && *end != ',')) {
        char buf[512];
        snprintf(buf, sizeof buf, "bad launcher argument %s %s", what, text);
        fail(buf);
    }
    return value;
}

/* PATH opened one component at a time without following any symbolic link: O_PATH descriptors of its
 * parent and of itself (as nofollow.py). */
static int open_path(const char *path, int *parent_out, int *entry_out) {
    char copy[4096];
    if (path[0] != '/' || strlen(path) >= sizeof copy) return -1;
    strcpy(copy, path);
    int flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
    int parent = -1, entry = open("/", flags | O_DIRECTORY);
    if (entry < 0) return -1;
    char *save = NULL, *name = strtok_r(copy, "/", &save);
    if (name == NULL) { close(entry); return -1; }
    while (name != NULL) {
        char *next = strtok_r(NULL, "/", &save);
        if (!strcmp(name, ".") || !strcmp(name, "..")) goto bad;
        if (parent >= 0) close(parent);
        parent = entry;
        entry = openat(parent, name, next ? flags | O_DIRECTORY : flags);
        if (entry < 0) goto bad;
        name = next;
    }
    struct stat st;
    if (fstat(entry, &st) || S_ISLNK(st.st_mode)) goto bad;
    *parent_out = parent;
    *entry_out = entry;
    return 0;
bad:
    if (parent >= 0) close(parent);
    if (entry >= 0) close(entry);
    return -1;
}

#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x1000U
#endif

/* The mount the descriptor lies on: statx (Linux >= 5.8, one call), else /proc/self/fdinfo (an open and a read;
 * five binds cost ten of each on every command). */
static long mount_id(int fd) {
#ifdef STATX_TYPE /* (a C library without statx: the fallback alone) */
    struct statx sx;
    if (!statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &sx) && (sx.stx_mask & STATX_MNT_ID))
        return (long)sx.stx_mnt_id;
#endif
    char name[64], text[4096];
    snprintf(name, sizeof name, "/proc/self/fdinfo/%d", fd);
    int info = open(name, O_RDONLY | O_CLOEXEC);
    if (info < 0) return -1;
    ssize_t n = read(info, text, sizeof text - 1);
    close(info);
    if (n <= 0) return -1;
    text[n] = 0;
    char *at = strstr(text, "mnt_id:");
    return at ? strtol(at + 7, NULL, 10) : -1;
}

/* MODE:DEV:INO:PATH: bubblewrap bound that inode at PATH (resolving PATH itself); PATH, looked up without
 * following a symlink, must be a mount point of that inode, read-only when MODE is ro. */
static void check_bound(const char *item) {
    const char *a = strchr(item, ':'), *b = a ? strchr(a + 1, ':') : NULL, *c = b ? strchr(b + 1, ':') : NULL;
    if (!c) fail(MOVED);
    unsigned long long dev = number(a + 1, "--bound"), ino = number(b + 1, "--bound");
    int readonly = !strncmp(item, "ro:", 3);
    int parent, entry;
    if (open_path(c + 1, &parent, &entry)) fail(MOVED);
    struct stat st;
    struct statvfs vfs;
    long mine = mount_id(entry), above = mount_id(parent);
    int landed = !fstat(entry, &st) && st.st_dev == dev && st.st_ino == ino && mine >= 0 && above >= 0
                 && mine != above && (!readonly || (!fstatvfs(entry, &vfs) && (vfs.f_flag & ST_RDONLY)));
    close(parent);
    close(entry);
    if (!landed) fail(MOVED);
}

/* A rule for PATH, or (PATH NULL) for the descriptor GIVEN: a handle the server holds (a root), never reopened. */
static void add_rule(int ruleset, const char *path, int given, uint64_t access, uint64_t handled) {
    int fd = path ? open(path, O_PATH | O_CLOEXEC) : given;
    if (fd < 0) {
        if (path && (errno == ENOENT || errno == ENOTDIR)) return; /* nothing there to grant access to */
        confine_error(path ? path : "a root's handle");
    }
    struct stat st;
    if (fstat(fd, &st)) confine_error(path ? path : "a root's handle");
    access &= handled;
    if (!S_ISDIR(st.st_mode)) access &= FILE_RIGHTS;
    if (access) {
        struct path_beneath attr = {access, fd};
        if (syscall(SYS_ADD_RULE, ruleset, 1, &attr, 0)) confine_error("landlock_add_rule");
    }
    close(fd);
}

static uint64_t fs_handled(long abi) {
    if (abi <= 1) return (1ULL << 13) - 1;
    if (abi == 2) return (1ULL << 14) - 1;
    if (abi <= 4) return (1ULL << 15) - 1;
    return (1ULL << 16) - 1;
}

struct rules { const char *path[MAX_ITEMS]; int fd[MAX_ITEMS]; uint64_t access[MAX_ITEMS]; int n; };

static int build_ruleset(long abi, int network, const struct rules *rules) {
    uint64_t handled = fs_handled(abi);
    struct ruleset_attr attr = {handled, 0, 0};
    size_t size = 8;
    if (abi >= 4) {
        size = 16;
        if (!network) attr.net = 3; /* TCP bind and connect, no port granted */
    }
    if (abi >= 6) {
        size = 24;
        attr.scoped = 3; /* abstract UNIX sockets, signals */
    }
    int ruleset = (int)syscall(SYS_CREATE_RULESET, &attr, size, 0);
    if (ruleset < 0) confine_error("landlock_create_ruleset");
    for (int i = 0; i < rules->n; i++) add_rule(ruleset, rules->path[i], rules->fd[i], rules->access[i], handled);
    return ruleset;
}

static void switch_user(const char *item) {
    unsigned long long uid = number(item, "--user");
    const char *g = strchr(item, ':');
    if (!g) fail("bad launcher argument --user");
    unsigned long long gid = number(g + 1, "--user");
    const char *list = strchr(g + 1, ':');
    if (!list) fail("bad launcher argument --user");
    gid_t groups[256];
    size_t n = 0;
    for (const char *p = list + 1; *p;) {
        if (n == 256) fail("too many supplementary groups for --user");
        groups[n++] = (gid_t)number(p, "--user");
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    /* A single thread: the C library's calls are fine here. */
    if (setgroups(n, groups)) confine_error("setgroups");
    if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid)) confine_error("setresgid");
    if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid)) confine_error("setresuid");
}

/* Empty the bounding set: each capability in it dropped (only those: a drop copies and commits the credentials);
 * 0 when done, -1 (errno) when a look or a drop failed (EPERM without CAP_SETPCAP). The supervisor's G and X need
 * it done. Here it is belt and braces, where this process may (a root server's commands under Landlock alone):
 * no_new_privs already keeps an exec from granting anything, and `CapBnd: 0` says so at a glance; without
 * CAP_SETPCAP (a non-root server, inside bubblewrap) the first drop fails and the set stays as it is. */
static int drop_bounding_set(void) {
    for (int c = 0; c < 64; c++) {
        int in = prctl(PR_CAPBSET_READ, c, 0, 0, 0);
        if (in < 0) return errno == EINVAL ? 0 : -1; /* EINVAL: past the last capability this kernel has */
        if (in && prctl(PR_CAPBSET_DROP, c, 0, 0, 0)) return -1;
    }
    return 0;
}

static void drop_capabilities(void) {
    struct cap_header header = {CAP_VERSION_3, 0};
    struct cap_data data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &header, data)) confine_error("capset");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) confine_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
}

/* The private HOME: new, or one this user already made in this /tmp (never someone else's, never a link). */
static void make_home(const char *path) {
    if (!mkdir(path, 0700)) return;
    if (errno != EEXIST) confine_error(path);
    struct stat st;
    if (lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        char buf[4200];
        snprintf(buf, sizeof buf, "%s exists and is not this user's directory", path);
        fail(buf);
    }
}

/* The seccomp program in the pipe FD (struct sock_filter array, up to BPF_MAXINSNS) read into `insns`; its
 * length in instructions. */
static unsigned short read_filter(int fd, struct sock_filter *insns) {
    size_t size = BPF_MAXINSNS * sizeof *insns, got = 0;
    ssize_t n;
    while (got < size && (n = read(fd, (char *)insns + got, size - got)) != 0) {
        if (n < 0 && errno != EINTR) confine_error("reading the seccomp filter");
        if (n > 0) got += (size_t)n;
    }
    close(fd);
    if (got == 0 || got % sizeof *insns) fail("cannot confine the command: bad seccomp filter");
    return (unsigned short)(got / sizeof *insns);
}

/* no_new_privs, then the filter, on this process (irreversible). */
static void set_filter(struct sock_filter *insns, unsigned short len) {
    struct sock_fprog prog = {len, insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) confine_error("prctl(PR_SET_NO_NEW_PRIVS)");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) confine_error("prctl(PR_SET_SECCOMP)");
}

static void install_filter(int fd) {
    static struct sock_filter insns[BPF_MAXINSNS];
    set_filter(insns, read_filter(fd, insns));
}

/* The command gets stdin, stdout and stderr only: not the descriptor this launcher was executed from (Landlock
 * alone runs it from a sealed in-memory file), nor anything else handed to it. */
static void no_inherited_descriptors(void) {
    if (!syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC)) return;
    for (int fd = 3; fd < 65536; fd++) (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* kernels before 5.11 */
}

int main(int argc, char **argv) {
    const char *cwd = NULL, *user = NULL, *bound[MAX_ITEMS], *limit[MAX_ITEMS], *home[8];
    int nbound = 0, nlimit = 0, nhome = 0, network = 0, filter = -1;
    long abi = 0;
    struct rules rules = {.n = 0};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--"); i += 2) {
        const char *opt = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        char buf[512];
        snprintf(buf, sizeof buf, "bad launcher argument '%s'", opt);
        if (!value || strncmp(opt, "--", 2)) fail(buf);
        opt += 2;
        int by_fd = !strcmp(opt, "read-fd") || !strcmp(opt, "write-fd");
        uint64_t access = !strcmp(opt, "read") || !strcmp(opt, "read-fd") ? FS_READ
                        : !strcmp(opt, "write") || !strcmp(opt, "write-fd") ? FS_WRITE
                        : !strcmp(opt, "device") ? FS_DEVICE : !strcmp(opt, "list") ? LL_READ_DIR : 0;
        if (access) {
            if (rules.n == MAX_ITEMS) fail(buf);
            rules.path[rules.n] = by_fd ? NULL : value;
            rules.fd[rules.n] = by_fd ? (int)number(value, opt - 2) : -1;
            rules.access[rules.n++] = access;
        } else if (!strcmp(opt, "cwd")) cwd = value;
        else if (!strcmp(opt, "bound") && nbound < MAX_ITEMS) bound[nbound++] = value;
        else if (!strcmp(opt, "limit") && nlimit < MAX_ITEMS) limit[nlimit++] = value;
        else if (!strcmp(opt, "user")) user = value;
        else if (!strcmp(opt, "mkdir") && nhome < 8) home[nhome++] = value;
        else if (!strcmp(opt, "net")) network = !strcmp(value, "1");
        else if (!strcmp(opt, "abi")) abi = (long)number(value, "--abi");
        else if (!strcmp(opt, "filter")) filter = (int)number(value, "--filter");
        else fail(buf); /* (--seccomp included: bubblewrap installs the filter before this runs) */
    }
    if (i >= argc || argc - i - 1 < 2) fail("no command given");
    char **command = argv + i + 1;

    if (cwd) {
        struct stat st;
        const char *ino = strchr(cwd, ':');
        if (!ino || stat(".", &st) || st.st_dev != number(cwd, "--cwd") || st.st_ino != number(ino + 1, "--cwd"))
            fail("the working directory changed between the check and the start; nothing was run");
    }
    for (int k = 0; k < nbound; k++) check_bound(bound[k]); /* before the user switch: CAP_DAC_READ_SEARCH */
    for (int k = 0; k < nlimit; k++) {
        const char *v = strchr(limit[k], ':');
        if (!v) fail("bad launcher argument --limit");
        rlim_t value = (rlim_t)number(v + 1, "--limit");
        struct rlimit rl = {value, value};
        if (setrlimit((int)number(limit[k], "--limit"), &rl)) confine_error("setrlimit");
    }
    /* Built before the user switch: the rules' paths are opened with the launcher's permissions. */
    int ruleset = abi ? build_ruleset(abi, network, &rules) : -1;
    (void)drop_bounding_set(); /* (before the user switch takes CAP_SETPCAP away) */
    if (user) switch_user(user);
    drop_capabilities();
    for (int k = 0; k < nhome; k++) make_home(home[k]);
    if (ruleset >= 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) confine_error("prctl(PR_SET_NO_NEW_PRIVS)");
        if (syscall(SYS_RESTRICT_SELF, ruleset, 0)) confine_error("landlock_restrict_self");
        close(ruleset);
    }
    if (filter >= 0) install_filter(filter);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGXFSZ, SIG_DFL);
    no_inherited_descriptors();
    execve(command[0], command + 1, environ);
    char buf[4200];
    if (errno == ENOENT) {
        snprintf(buf, sizeof buf, "%s: not found", command[1]);
        fail_code(127, buf);
    }
    snprintf(buf, sizeof buf, "cannot execute %s: %s", command[1], strerror(errno));
    fail(buf);
}
