/* The command supervisor: one long-lived process inside ONE bubblewrap sandbox (per view: policy and roots), that
 * starts each command in namespaces of its own, in well under a millisecond, where a bubblewrap per command costs
 * about ten (`supervisor.py` starts it and talks to it; docs/security.md says what each step guarantees).
 *
 *     supervisor SOCKFD FILTERFD [--newnet] [--carry PATH]... [--user UID:GID]
 *
 * SOCKFD: a SOCK_SEQPACKET socket to the server (inherited, reachable by no name). FILTERFD: a pipe holding the
 * seccomp program (struct sock_filter[]), read once; -1 for none. --newnet: a network namespace per command.
 * --carry PATH: a bind under /tmp (a root, a read path...) moved into each command's fresh /tmp.
 * --user UID:GID: a server that is not root. Its sandbox's user namespace maps the server's user as uid 0 (only
 * then can the supervisor mount /proc and devpts for each command); each command enters a user namespace of its
 * own that maps it back to UID:GID, as a bubblewrap per command does (its second user namespace).
 *
 * A request: one message of NUL-terminated fields, each tagged by its first byte, and the command's stdout and
 * stderr write ends (SCM_RIGHTS):
 *     i<id>                      the request's number, echoed in the replies
 *     c<dev>:<ino>:<path>        the working directory: PATH, looked up again inside the command's own mount
 *                                namespace without following any link, must be this inode (the one the server
 *                                checked); a descriptor from outside would bypass every per-command bind
 *     g<rw|ro>:<dev>:<ino>:<path>   a guard (protect.py): this inode, at PATH, bound over itself (parents first)
 *     e<NAME=value>              the environment
 *     x<arg>                     the launcher's arguments (exec_helper.c, after its name): limits, Landlock, ...
 * Replies (struct reply): STARTED with the namespace init's pidfd (SCM_RIGHTS) and PID (SCM_CREDENTIALS), then
 * EXITED with its status
 * (exit code, or the signal that ended it); ERROR (errno) when nothing could be started. After start-up: READY.
 *
 * Per command: clone3(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC[|CLONE_NEWNET]|CLONE_PIDFD) -> G, PID 1 of a new PID
 * namespace (its end kills every process in it), in a session of its own; G mounts a fresh /tmp (carrying the
 * binds under it), /proc (with bubblewrap's read-only covers) and /dev/shm, binds the guards by descriptor, enters
 * the working directory, and forks X, the command; then G drops everything (capabilities, descriptors, dumpable)
 * and only reaps. X keeps CAP_DAC_READ_SEARCH alone (its bounding set empty), sets no_new_privs and
 * the seccomp filter, and runs the launcher (exec_helper.c, compiled in), which sets the limits and Landlock,
 * drops the last capability and executes the command. Any failure before that: a message on the command's stderr, exit
 * 126, nothing run. G's namespaces, session and mounts are made ahead, while no command runs (a spare G: see
 * make_spare); the request's part (guards, working directory, X) waits for the request.
 */
#define _GNU_SOURCE
/* The launcher, compiled in: X calls its main instead of executing it (one exec and a dynamic load fewer). Its
 * fail(), confine_error(), MOVED and capability structures serve here too. */
#define main launcher_main
#include "exec_helper.c"
#undef main

#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define HELPER "/.rootbound-exec"
#define MAX_MSG (256 * 1024)
#define MAX_FIELDS 8192
#define MAX_CARRY 64
#define MAXRUN 257 /* commands running at once (supervisor.py's MAX_RUNNING), and the spare */
#define SPARE_DELAY_MS 5 /* quiet for that long after a command's end: the spare G is made */
#define CAP_DAC_READ_SEARCH 2

enum { R_READY = 0, R_STARTED = 1, R_EXITED = 2, R_ERROR = 3 };
struct reply { uint32_t id, type; int32_t code, signal; }; /* ERROR: signal holds the errno */

static int sock = -1, newnet;
static long as_uid = -1, as_gid = -1; /* --user */
static const char *carry[MAX_CARRY];
static int ncarry;
static struct sock_filter filter[BPF_MAXINSNS];
static unsigned short filter_len;
static volatile int *term_slots; /* shared with each G: the signal that made it end everything (SIGTERM) */

/* One parsed request (in S, copied into G by the clone). */
static char msg[MAX_MSG + 1];
static struct {
    uint32_t id;
    const char *cwd;
    const char *guards[MAX_FIELDS];
    char *env[MAX_FIELDS + 1];
    char *args[MAX_FIELDS + 2];
    int nguards, nenv, nargs;
} req;

/* DEV:INO:REST -> dev, ino, and REST; 0 when malformed. */
static int identity(const char *text, unsigned long long *dev, unsigned long long *ino, const char **rest) {
    char *end;
    errno = 0;
    *dev = strtoull(text, &end, 10);
    if (errno || *end != ':') return 0;
    *ino = strtoull(end + 1, &end, 10);
    if (errno || *end != ':') return 0;
    *rest = end + 1;
    return 1;
}

/* PATH from /, in this mount namespace, following no link (not even the last: O_PATH|O_NOFOLLOW gives the link
 * itself, which is refused). */
static int open_nofollow(const char *path, int flags) {
    struct open_how how = {.flags = (uint64_t)(flags | O_PATH | O_NOFOLLOW | O_CLOEXEC),
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) || S_ISLNK(st.st_mode))) {
        close(fd);
        errno = ELOOP;
        return -1;
    }
    return fd;
}

static int same(int fd, unsigned long long dev, unsigned long long ino) {
    struct stat st;
    return !fstat(fd, &st) && st.st_dev == dev && st.st_ino == ino;
}

static void mkdirs(char *path) { /* (in the fresh /tmp: 0755, so a user can pass, as bubblewrap's --dir) */
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(path, 0755) && errno != EEXIST) confine_error(path);
            *p = '/';
        }
    if (mkdir(path, 0755) && errno != EEXIST) confine_error(path);
}

/* The fresh /tmp, with the binds that lived under the supervisor's /tmp moved into it (cloned first). */
static void fresh_tmp(void) {
    int tree[MAX_CARRY];
    for (int i = 0; i < ncarry; i++) {
        tree[i] = (int)syscall(SYS_open_tree, AT_FDCWD, carry[i],
                               OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
        if (tree[i] < 0) confine_error("cloning a bind under /tmp");
    }
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")) confine_error("mount /tmp");
    for (int i = 0; i < ncarry; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s", carry[i]);
        mkdirs(path);
        if (syscall(SYS_move_mount, tree[i], "", AT_FDCWD, carry[i], MOVE_MOUNT_F_EMPTY_PATH))
            confine_error("moving a bind into /tmp");
        close(tree[i]);
    }
}

/* A fresh /proc of this PID namespace, with bubblewrap's read-only covers. */
static void fresh_proc(void) {
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) confine_error("mount /proc");
    static const char *cover[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"};
    for (size_t i = 0; i < sizeof cover / sizeof *cover; i++) {
        if (mount(cover[i], cover[i], NULL, MS_BIND | MS_REC, NULL)) {
            if (errno == ENOENT) continue;
            confine_error(cover[i]);
        }
        if (mount(NULL, cover[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
            confine_error(cover[i]);
    }
}

/* A guard (protect.py): the inode the server found, bound over itself by descriptor (nothing resolved again
 * after the check), read-only unless it is a kept directory on the way (.git). */
static void bind_guard(const char *item) {
    int writable = !strncmp(item, "rw:", 3);
    unsigned long long dev, ino;
    const char *path;
    if (strlen(item) < 3 || !identity(item + 3, &dev, &ino, &path)) fail(MOVED);
    int fd = open_nofollow(path, 0);
    if (fd < 0 || !same(fd, dev, ino)) fail(MOVED);
    /* Recursive: a mount below the guard (a read-only root nested in .git or .claude, a read path) comes along,
     * instead of being covered by a writable copy of the directory above it. */
    int tree = (int)syscall(SYS_open_tree, fd, "",
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    if (tree < 0) confine_error("open_tree (a guard)");
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY)};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr))
        confine_error("mount_setattr");
    if (syscall(SYS_move_mount, tree, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH))
        confine_error("move_mount (a guard)");
    close(tree);
    close(fd);
}

static void enter_cwd(const char *item) {
    unsigned long long dev, ino;
    const char *path;
    if (!identity(item, &dev, &ino, &path)) fail("bad working directory");
    int fd = open_nofollow(path, O_DIRECTORY);
    if (fd < 0 || !same(fd, dev, ino) || fchdir(fd))
        fail("the working directory changed between the check and the start; nothing was run");
    close(fd);
}

/* Capabilities: the bounding set emptied (needs CAP_SETPCAP, so first: nothing can be gained again by an exec),
 * then every set down to `keep` (capabilities below 32), permitted and effective. */
static void drop_caps(uint32_t keep) {
    if (drop_bounding_set()) confine_error("emptying the bounding set");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) confine_error("PR_CAP_AMBIENT_CLEAR_ALL");
    struct cap_header h = {CAP_VERSION_3, 0};
    struct cap_data d[2];
    memset(d, 0, sizeof d);
    d[0].effective = d[0].permitted = keep;
    if (syscall(SYS_capset, &h, d)) confine_error("capset");
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) confine_error(path);
    close(fd);
}

/* --user: the server's user again, in a user namespace of the command's own (it may map only the uid it is in its
 * parent, 0: the server's; and setgroups is off, as for any unprivileged user namespace). Full capabilities there
 * come with it, over nothing the parent owns (the mounts, the namespaces): drop_caps follows. */
static void become_user(void) {
    char map[64];
    if (unshare(CLONE_NEWUSER)) confine_error("unshare(CLONE_NEWUSER)");
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%ld 0 1", as_uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "%ld 0 1", as_gid);
    write_file("/proc/self/gid_map", map);
}

/* X's own confinement, before the launcher: the server's user again, one capability, no_new_privs, the filter. */
static void confine_command(void) {
    if (as_uid >= 0) become_user();
    drop_caps(1U << CAP_DAC_READ_SEARCH); /* the launcher's, to open the rules' paths; it drops it */
    if (filter_len) set_filter(filter, filter_len); /* (no_new_privs first) before the launcher, as bubblewrap's */
    else if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) confine_error("PR_SET_NO_NEW_PRIVS");
}

/* X: the command's own process. */
static void command(void) {
    confine_command();
    environ = req.env;
    _exit(launcher_main(req.nargs, req.args)); /* (it executes the command, or fails: exit 126) */
}

static volatile sig_atomic_t slot_of_g = -1;

/* SIGTERM from the server (a timeout): end everything, as bubblewrap does when it is terminated. Only from outside
 * the namespace (a sender there has no PID here): one from the command itself (`kill 1` reaches a namespace's init
 * once it handles the signal; Landlock ABI >= 6 refuses it) is ignored, as bubblewrap's init ignores it. No one
 * inside can forge SI_USER with no PID: rt_sigqueueinfo to another process takes only negative codes. */
static void on_term(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (info->si_code != SI_USER || info->si_pid != 0) return;
    term_slots[slot_of_g] = sig;
    _exit(128 + sig); /* the end of a PID namespace's init kills every process in it */
}

/* The mounts of a command's own: a fresh /tmp, /proc, /dev/shm and /dev/pts. (Its namespace's copies of the
 * supervisor's mounts are slaves, as main made them: no mount made here reaches another namespace.) */
static void own_mounts(void) {
    fresh_tmp();
    fresh_proc();
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") && errno != ENOENT)
        confine_error("mount /dev/shm");
    /* Terminals of its own, as bubblewrap's --dev gives each: in the supervisor's devpts, another command's
     * terminals could be opened, written and read (/dev/ptmx is bubblewrap's link to pts/ptmx). */
    if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"))
        confine_error("mount /dev/pts");
}

/* G, once its request is parsed and stdin, stdout and stderr are in place: the guards, the working directory, the
 * command; then it only reaps. */
static void run_request(void) {
    for (int i = 0; i < req.nguards; i++) bind_guard(req.guards[i]);
    if (!req.cwd) fail("no working directory in the request");
    enter_cwd(req.cwd);
    pid_t x = fork();
    if (x < 0) confine_error("fork");
    if (x == 0) command();
    /* The init keeps nothing a command could use: no capability, not dumpable (no ptrace, no /proc/1/mem), no
     * descriptor. */
    struct sigaction term = {.sa_sigaction = on_term, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&term.sa_mask);
    if (sigaction(SIGTERM, &term, NULL)) confine_error("sigaction");
    drop_caps(0);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    syscall(SYS_close_range, 0U, ~0U, 0);
    int status = 0;
    for (;;) { /* (orphans are ours too, PID 1: reaped as they come) */
        int st;
        pid_t p = wait(&st);
        if (p == x) {
            status = st;
            break; /* the command ended: so does everything it left (the namespace ends with its init) */
        }
        if (p < 0 && errno != EINTR) break;
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)); /* as bubblewrap's init */
}

/* G: PID 1 of the command's namespaces; stdin, stdout and stderr already in place. */
static void namespace_init(void) {
    if (setsid() < 0) confine_error("setsid");
    own_mounts();
    run_request();
}

/* A reply; with `fd` (a pidfd) also `pid`'s credentials, which the kernel translates into the server's numbering
 * (the process is our unreaped child: its PID cannot be anyone else's yet). */
static void reply(uint32_t id, uint32_t type, int32_t code, int32_t sig, int fd, pid_t pid) {
    struct reply r = {id, type, code, sig};
    struct iovec iov = {&r, sizeof r};
    union { char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))]; struct cmsghdr align; } cbuf;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&cbuf, 0, sizeof cbuf);
        m.msg_control = cbuf.buf;
        m.msg_controllen = sizeof cbuf.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
        c = CMSG_NXTHDR(&m, c);
        struct ucred cred = {pid, getuid(), getgid()};
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_CREDENTIALS;
        c->cmsg_len = CMSG_LEN(sizeof cred);
        memcpy(CMSG_DATA(c), &cred, sizeof cred);
    }
    if (sendmsg(sock, &m, MSG_NOSIGNAL) < 0) _exit(0); /* the server is gone: so is everything here */
}

static struct { int pidfd, slot; uint32_t id; } running[MAXRUN];
static int nrunning;

/* One request from `from` into msg, and the descriptors it carries (the first two in fds, the others closed);
 * *cut: the message or its descriptors did not fit. */
static ssize_t receive(int from, int fds[2], int *nfds, int *cut) {
    char cbuf[CMSG_SPACE(2 * sizeof(int))];
    struct iovec iov = {msg, MAX_MSG};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    ssize_t n = recvmsg(from, &m, MSG_CMSG_CLOEXEC);
    *nfds = 0;
    for (struct cmsghdr *c = n < 0 ? NULL : CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                if (*nfds < 2) fds[(*nfds)++] = fd;
                else close(fd);
            }
        }
    *cut = n >= 0 && (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    return n;
}

static int parse(size_t n) {
    /* The counts reset, not the arrays: zeroing all of them wrote 200 KB per request, copied page by page where a
     * spare G still shared them. Each list is ended below. */
    req.id = 0;
    req.cwd = NULL;
    req.nguards = req.nenv = req.nargs = 0;
    req.args[req.nargs++] = (char *)HELPER;
    msg[n] = 0;
    for (size_t at = 0; at < n;) {
        char *field = msg + at, tag = field[0];
        char *value = field + 1;
        at += strlen(field) + 1;
        if (tag == 'i') req.id = (uint32_t)strtoul(value, NULL, 10);
        else if (tag == 'c') req.cwd = value;
        else if (tag == 'g' && req.nguards < MAX_FIELDS) req.guards[req.nguards++] = value;
        else if (tag == 'e' && req.nenv < MAX_FIELDS) req.env[req.nenv++] = value;
        else if (tag == 'x' && req.nargs < MAX_FIELDS) req.args[req.nargs++] = value;
        else return 0;
    }
    req.env[req.nenv] = NULL;
    req.args[req.nargs] = NULL;
    return req.nargs > 1;
}

/* A command's namespace init G: a child in new mount, PID and IPC (and network) namespaces, with a pidfd. */
static long clone_init(int *pidfd) {
    struct clone_args ca = {.flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_PIDFD |
                                     (newnet ? CLONE_NEWNET : 0),
                            .pidfd = (uint64_t)(uintptr_t)pidfd, .exit_signal = SIGCHLD};
    return syscall(SYS_clone3, &ca, sizeof ca);
}

/* A new G in `slot`, with its pidfd; in the child (0 returned) the server's socket is closed already. */
static long fork_g(int slot, int *pidfd) {
    term_slots[slot] = 0;
    slot_of_g = slot;
    long pid = clone_init(pidfd);
    if (pid == 0) close(sock); /* never the command's */
    return pid;
}

/* A G's stdin from /dev/null; stdout and stderr the command's pipes. */
static void command_stdio(const int fds[2]) {
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(fds[0], 1) < 0 || dup2(fds[1], 2) < 0) _exit(126);
}

/* The spare G: made while no command runs (new namespaces, its session, its own mounts: about a millisecond, most
 * of a start), it waits on a socketpair of its own for the next request, which the supervisor forwards as it came
 * (with the command's stdout and stderr), once the spare has said it is ready. A spare that is not ready yet is
 * left for a later command; one that failed (its reason on the supervisor's stderr) ends the spares: each command
 * then gets its G at its start, as before, which reports on the command's own stderr. */
static struct { int pidfd, sock, slot; long pid; } spare = {-1, -1, -1, 0};
static int spares_off;

/* The slot of a new G: one no running command's G has, nor the spare. */
static int free_slot(void) {
    for (int s = 0; s < MAXRUN; s++) {
        int used = spare.pidfd >= 0 && spare.slot == s;
        for (int k = 0; k < nrunning; k++) used |= running[k].slot == s;
        if (!used) return s;
    }
    return -1;
}

/* The spare's side: ready, then one request, then the command as any G runs it. */
static void spare_init(int from) {
    if (setsid() < 0) confine_error("setsid");
    own_mounts();
    char ready = 1;
    if (send(from, &ready, 1, MSG_NOSIGNAL) != 1) _exit(0);
    int fds[2] = {-1, -1}, nfds, cut;
    ssize_t n = receive(from, fds, &nfds, &cut);
    if (n == 0) _exit(0); /* the supervisor ended, or let it go: no command */
    if (n < 0 || cut || nfds != 2) { /* its command was started (STARTED is sent) and cannot run: say so, 126 */
        if (nfds == 2) dup2(fds[1], 2);
        fail("the command could not be handed to its namespace; nothing was run. Try again");
    }
    close(from);
    command_stdio(fds);
    if (!parse((size_t)n)) fail("bad request"); /* (the supervisor parsed these very bytes) */
    run_request();
}

static void drop_spare(void) {
    syscall(SYS_pidfd_send_signal, spare.pidfd, SIGKILL, NULL, 0);
    siginfo_t si;
    while (waitid(P_PIDFD, (id_t)spare.pidfd, &si, WEXITED) < 0 && errno == EINTR) continue;
    close(spare.pidfd);
    close(spare.sock);
    spare.pidfd = spare.sock = -1;
}

static void make_spare(void) {
    int slot = free_slot(), sp[2];
    if (slot < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp)) {
        spares_off = 1; /* (not tried again every 5 ms) */
        return;
    }
    int size = MAX_MSG + 4096; /* (a request of up to MAX_MSG, in one message) */
    setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    int pidfd = -1;
    long pid = fork_g(slot, &pidfd);
    if (pid == 0) {
        close(sp[0]);
        spare_init(sp[1]);
    }
    close(sp[1]);
    if (pid < 0) {
        close(sp[0]);
        spares_off = 1;
        return;
    }
    spare.pidfd = pidfd;
    spare.sock = sp[0];
    spare.slot = slot;
    spare.pid = pid;
}

/* The parsed request in msg (n bytes) to the spare, if there is one ready; then it runs as this request's G. */
static int to_spare(size_t n, const int fds[2]) {
    if (spare.pidfd < 0) return 0;
    char ready;
    ssize_t got = recv(spare.sock, &ready, 1, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0; /* not ready yet: kept for a later one */
    if (got != 1) { /* it ended before it was ready */
        drop_spare();
        spares_off = 1;
        return 0;
    }
    union { char buf[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } cbuf;
    memset(&cbuf, 0, sizeof cbuf);
    struct iovec iov = {msg, n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof cbuf.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(c), fds, 2 * sizeof(int));
    if (sendmsg(spare.sock, &m, MSG_NOSIGNAL) != (ssize_t)n) {
        drop_spare();
        return 0;
    }
    close(fds[0]);
    close(fds[1]);
    close(spare.sock);
    running[nrunning].pidfd = spare.pidfd;
    running[nrunning].slot = spare.slot;
    running[nrunning++].id = req.id;
    reply(req.id, R_STARTED, (int32_t)spare.pid, 0, spare.pidfd, (pid_t)spare.pid);
    spare.pidfd = spare.sock = -1;
    return 1;
}

static void start(void) {
    int fds[2] = {-1, -1}, nfds, cut;
    ssize_t n = receive(sock, fds, &nfds, &cut);
    if (n <= 0) _exit(0); /* the server closed its end */
    int parsed = parse((size_t)n); /* first, whatever else is wrong: an error reply must carry this request's id */
    int ok = !cut && nfds == 2 && parsed;
    if (ok && to_spare((size_t)n, fds)) return;
    int slot = ok ? free_slot() : -1;
    if (!ok || slot < 0) {
        for (int i = 0; i < nfds; i++) close(fds[i]);
        reply(req.id, R_ERROR, 0, ok ? EAGAIN : EINVAL, -1, 0);
        return;
    }
    int pidfd = -1;
    long pid = fork_g(slot, &pidfd);
    if (pid == 0) {
        command_stdio(fds);
        namespace_init();
    }
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    if (pid < 0) {
        reply(req.id, R_ERROR, 0, err, -1, 0);
        return;
    }
    running[nrunning].pidfd = pidfd;
    running[nrunning].slot = slot;
    running[nrunning++].id = req.id;
    reply(req.id, R_STARTED, (int32_t)pid, 0, pidfd, (pid_t)pid);
}

/* Before READY, one trial of what every command's start does (namespaces, mounts, a guard's bind, the user
 * mapped back, the filter), with no command: a kernel or a policy that refuses part of it (an older kernel,
 * AppArmor's user-namespace restrictions, a container's seccomp profile) makes the supervisor fail to start, and
 * the server gives each command a bubblewrap of its own instead of failing every command. The reason is on
 * stderr. Returns 0 when it all worked. */
static int trial(void) {
    int pidfd = -1;
    long pid = clone_init(&pidfd);
    if (pid < 0) {
        fprintf(stderr, "rootbound supervisor: clone3 (new namespaces): %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(sock);
        own_mounts();
        struct stat st;
        char guard[128];
        if (stat("/tmp", &st)) confine_error("/tmp");
        snprintf(guard, sizeof guard, "ro:%llu:%llu:/tmp", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        bind_guard(guard);
        pid_t x = fork();
        if (x < 0) confine_error("fork");
        if (x == 0) {
            confine_command();
            _exit(0);
        }
        int status = 0;
        while (waitpid(x, &status, 0) < 0 && errno == EINTR) continue;
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
    }
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int got = waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED);
    close(pidfd);
    return !got && si.si_code == CLD_EXITED && si.si_status == 0 ? 0 : -1;
}

static void reap(int k) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int code = -1, sig = 0;
    if (!waitid(P_PIDFD, (id_t)running[k].pidfd, &si, WEXITED)) {
        if (si.si_code == CLD_EXITED) code = si.si_status;
        else sig = si.si_status;
    }
    if (term_slots[running[k].slot]) { /* it ended everything on SIGTERM: report that signal, as bubblewrap */
        code = -1;
        sig = term_slots[running[k].slot];
    }
    reply(running[k].id, R_EXITED, code, sig, -1, 0);
    close(running[k].pidfd);
    running[k] = running[--nrunning];
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: supervisor SOCKFD FILTERFD [--newnet] [--carry PATH]... [--user UID:GID]\n");
        return 2;
    }
    sock = atoi(argv[1]);
    int ffd = atoi(argv[2]);
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--newnet")) newnet = 1;
        else if (!strcmp(argv[i], "--carry") && i + 1 < argc && ncarry < MAX_CARRY) carry[ncarry++] = argv[++i];
        else if (!strcmp(argv[i], "--user") && i + 1 < argc && sscanf(argv[i + 1], "%ld:%ld", &as_uid, &as_gid) == 2
                 && as_uid >= 0 && as_gid >= 0) i++;
        else {
            fprintf(stderr, "supervisor: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (ffd >= 0) filter_len = read_filter(ffd, filter); /* (a bad one: a message on stderr, and it ends) */
    if (fcntl(sock, F_SETFD, FD_CLOEXEC)) return 1;
    term_slots = mmap(NULL, sizeof(int) * MAXRUN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (term_slots == MAP_FAILED) return 1;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* no ptrace of, nor /proc/PID/mem on, the supervisor */
    /* Receive-only, once, here, not in each command's namespace (a recursive walk of every mount per command): a
     * new mount namespace copies each mount with its propagation, so every command's copy is a slave too. Nothing
     * a command's namespace mounts reaches the supervisor's or another command's; what the host mounts or unmounts
     * under a root still reaches them all, as under a bubblewrap per command (bubblewrap makes its mounts slaves).
     * The supervisor mounts nothing after this. */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL)) {
        fprintf(stderr, "rootbound supervisor: making the mounts receive-only: %s\n", strerror(errno));
        return 1;
    }
    if (trial()) return 1;
    reply(0, R_READY, 0, 0, -1, 0);
    struct pollfd p[MAXRUN + 1];
    for (;;) {
        /* A spare is made between commands, once the server has had the last one's end: made at once, it took both
         * CPUs of a small machine from the server while it finished that command. */
        int spare_wait = !nrunning && spare.pidfd < 0 && !spares_off ? SPARE_DELAY_MS : -1;
        p[0].fd = sock;
        p[0].events = POLLIN;
        for (int k = 0; k < nrunning; k++) {
            p[k + 1].fd = running[k].pidfd;
            p[k + 1].events = POLLIN;
        }
        int n = poll(p, (nfds_t)nrunning + 1, spare_wait);
        if (n < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (n == 0) {
            make_spare();
            continue;
        }
        for (int k = nrunning - 1; k >= 0; k--)
            if (p[k + 1].revents) reap(k);
        if (p[0].revents & POLLIN) start();
        else if (p[0].revents & (POLLHUP | POLLERR)) return 0;
    }
}
