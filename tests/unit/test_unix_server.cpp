// The node agent's unix control sockets (lib/net/unix_server.hpp): the
// socket file's mode, a client's SO_PEERCRED credentials, a stale file
// replaced, the file removed with the server, and clear errors; a uid's
// connections bounded, and only root and SlurmdUser where a socket is
// theirs alone, and a connection that does not complete its first request
// within the deadline closed while an established one idles on (issue 39,
// hole 4).
#include "tests/unit/cmocka.hpp"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "lib/net/unix_server.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace std::chrono_literals;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

struct Bench {
    event_base *base = event_base_new();
    std::string dir;
    struct Accepted {
        int fd;
        ucred cred;
    };
    std::vector<Accepted> accepted;
    Bench()
    {
        char tmpl[] = "/tmp/storm-unix-server-test.XXXXXX";
        dir = mkdtemp(tmpl);
    }
    ~Bench()
    {
        for (auto &a : accepted)
            close(a.fd);
        event_base_free(base);
        std::system(("rm -rf " + dir).c_str());
    }
    std::string sock() const { return dir + "/s.sock"; }
    std::unique_ptr<net::UnixServer> server(const std::string &path)
    {
        return std::make_unique<net::UnixServer>(base, path, Logger("test"), "test", "test socket",
                                                 [this](int fd, const ucred &cred) {
                                                     accepted.push_back({fd, cred});
                                                 });
    }
    // Runs the loop until `done` or 2 s have passed.
    bool spin_until(const std::function<bool()> &done)
    {
        auto until = std::chrono::steady_clock::now() + 2s;
        while (!done()) {
            if (std::chrono::steady_clock::now() >= until)
                return false;
            timeval tv{0, 10000};
            event_base_loopexit(base, &tv);
            event_base_dispatch(base);
        }
        return true;
    }
};

int connect_to(const std::string &path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, path.c_str());
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int g_reads = 0;
void on_read(int fd, short, void *)
{
    char buf[64];
    if (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ++g_reads;
}

// The file is a socket of mode 0666 (tasks of every user reach it); a
// client's SO_PEERCRED reaches on_client, on a non-blocking close-on-exec
// connection that watch_readable() watches.
void test_mode_and_credentials(void **)
{
    Bench b;
    umask(022);
    auto s = b.server(b.sock());
    assert_false(s->listening());
    s->start();
    assert_true(s->listening());
    struct stat st {};
    assert_int_equal(stat(b.sock().c_str(), &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0666);

    int c = connect_to(b.sock());
    assert_true(c >= 0);
    assert_true(b.spin_until([&] { return b.accepted.size() == 1; }));
    const auto &a = b.accepted[0];
    assert_int_equal(a.cred.pid, getpid());
    assert_int_equal(a.cred.uid, getuid());
    assert_int_equal(a.cred.gid, getgid());
    assert_true(fcntl(a.fd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(a.fd, F_GETFD) & FD_CLOEXEC);

    event *ev = net::watch_readable(b.base, a.fd, on_read, nullptr);
    assert_non_null(ev);
    g_reads = 0;
    assert_int_equal(send(c, "hi", 2, 0), 2);
    assert_true(b.spin_until([] { return g_reads == 1; }));
    assert_int_equal(send(c, "again", 5, 0), 5); // persistent
    assert_true(b.spin_until([] { return g_reads == 2; }));
    event_free(ev);

    // A second client, and the first one's connection is not disturbed.
    int c2 = connect_to(b.sock());
    assert_true(c2 >= 0);
    assert_true(b.spin_until([&] { return b.accepted.size() == 2; }));
    assert_int_equal(b.accepted[1].cred.pid, getpid());
    close(c);
    close(c2);
}

// A stale socket of an earlier agent (bound, never removed) and any other
// file left at the path are replaced.
void test_stale_replaced(void **)
{
    Bench b;
    int stale = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, b.sock().c_str());
    assert_int_equal(bind(stale, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
    close(stale);
    assert_int_equal(connect_to(b.sock()), -1); // nobody listens there
    {
        auto s = b.server(b.sock());
        s->start();
        int c = connect_to(b.sock());
        assert_true(c >= 0);
        assert_true(b.spin_until([&] { return b.accepted.size() == 1; }));
        close(c);
    }
    std::system(("echo junk > " + b.sock()).c_str());
    auto s = b.server(b.sock());
    s->start();
    struct stat st {};
    assert_int_equal(stat(b.sock().c_str(), &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    int c = connect_to(b.sock());
    assert_true(c >= 0);
    close(c);
}

// The file goes with the server; the accepted connections are the owner's
// and stay open.
void test_unlinked_on_destruction(void **)
{
    Bench b;
    auto s = b.server(b.sock());
    s->start();
    int c = connect_to(b.sock());
    assert_true(c >= 0);
    assert_true(b.spin_until([&] { return b.accepted.size() == 1; }));
    s.reset();
    assert_int_equal(access(b.sock().c_str(), F_OK), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(send(c, "x", 1, MSG_NOSIGNAL), 1);
    char buf[4];
    assert_int_equal(recv(b.accepted[0].fd, buf, sizeof buf, 0), 1);
    close(c);
    // A server never started removes nothing (another agent's socket).
    auto other = b.server(b.sock());
    other->start();
    auto idle = b.server(b.sock());
    idle.reset();
    assert_int_equal(access(b.sock().c_str(), F_OK), 0);
}

// Failures are errors naming the component, the path and the reason, and
// leave no file behind.
void test_errors(void **)
{
    Bench b;
    std::string missing = b.dir + "/missing/s.sock";
    auto s = b.server(missing);
    std::string e = error_of<std::system_error>([&] { s->start(); });
    assert_true(contains(e, "test: bind " + missing));
    assert_true(contains(e, std::strerror(ENOENT)));
    assert_false(s->listening());
    s.reset();
    assert_int_equal(access((b.dir + "/missing").c_str(), F_OK), -1);

    std::string longpath = b.dir + "/" + std::string(200, 'x');
    auto l = b.server(longpath);
    e = error_of<std::runtime_error>([&] { l->start(); });
    assert_true(contains(e, "test: test socket path too long: " + longpath));

    // Started twice: a logic error, the first socket untouched.
    auto t = b.server(b.sock());
    t->start();
    assert_true(contains(error_of<std::logic_error>([&] { t->start(); }), "is bound already"));
    int c = connect_to(b.sock());
    assert_true(c >= 0);
    close(c);
}

// A connection made as `uid` (SO_PEERCRED records the effective uid at
// connect), or -1.
int connect_as(uid_t uid, const std::string &path)
{
    if (seteuid(uid) != 0)
        return -1;
    int fd = connect_to(path);
    int e = errno;
    if (seteuid(0) != 0)
        abort();
    errno = e;
    return fd;
}

// Whether the server closed its end of `fd` (the client sees end of file).
bool closed_by_server(int fd)
{
    char b[8];
    return recv(fd, b, sizeof b, MSG_DONTWAIT) == 0;
}

// limit_per_uid(3): a user's fourth and fifth connections are closed at
// accept; root is exempt; a connection the owner closed frees its place.
// admit_only({}): a user's connection is closed at once, root's kept.
void test_admission(void **)
{
    if (geteuid() != 0)
        skip();
    const uid_t nobody = 65534;
    Bench b;
    assert_int_equal(chmod(b.dir.c_str(), 0755), 0);
    auto srv = b.server(b.sock());
    srv->limit_per_uid(3);
    srv->start();
    std::vector<int> user, root;
    for (int i = 0; i < 5; ++i)
        user.push_back(connect_as(nobody, b.sock()));
    for (int i = 0; i < 4; ++i)
        root.push_back(connect_to(b.sock()));
    for (int fd : user)
        assert_true(fd >= 0);
    assert_true(b.spin_until([&] { return b.accepted.size() + srv->refused() == 9; }));
    assert_int_equal(srv->refused(), 2);
    assert_int_equal(b.accepted.size(), 7);
    int closed = 0;
    for (int fd : user)
        closed += closed_by_server(fd);
    assert_int_equal(closed, 2);
    for (int fd : root)
        assert_false(closed_by_server(fd));
    // The owner closes one of the user's: the user may connect once more.
    for (auto it = b.accepted.begin(); it != b.accepted.end(); ++it)
        if (it->cred.uid == nobody) {
            close(it->fd);
            b.accepted.erase(it);
            break;
        }
    int again = connect_as(nobody, b.sock());
    assert_true(b.spin_until([&] { return b.accepted.size() == 7; }));
    assert_int_equal(srv->refused(), 2);
    assert_false(closed_by_server(again));

    auto only = b.server(b.dir + "/only.sock");
    only->admit_only({});
    only->start();
    int u = connect_as(nobody, b.dir + "/only.sock");
    int r = connect_to(b.dir + "/only.sock");
    assert_true(b.spin_until([&] { return b.accepted.size() == 8 && only->refused() == 1; }));
    assert_true(b.spin_until([&] { return closed_by_server(u); }));
    assert_false(closed_by_server(r));
    assert_int_equal(b.accepted.back().cred.uid, 0);
    for (int fd : user)
        close(fd);
    for (int fd : root)
        close(fd);
    close(again);
    close(u);
    close(r);
}

// first_request_within(): a connection idle past the deadline is handed to
// on_expired (and counted); one the owner settled stays however long it
// idles; one the owner closed itself, its descriptor number now another
// file's, is left alone.
void test_first_request_deadline(void **)
{
    Bench b;
    auto srv = b.server(b.sock());
    std::vector<int> expired;
    srv->first_request_within(300ms, [&](int fd) {
        expired.push_back(fd);
        close(fd);
    });
    srv->start();
    int idle = connect_to(b.sock());
    int talker = connect_to(b.sock());
    int quitter = connect_to(b.sock());
    assert_true(idle >= 0 && talker >= 0 && quitter >= 0);
    assert_true(b.spin_until([&] { return b.accepted.size() == 3; }));
    assert_int_equal(srv->unsettled(), 3);
    int idle_fd = b.accepted[0].fd, talker_fd = b.accepted[1].fd, quitter_fd = b.accepted[2].fd;
    // The talker's first request: the owner settles it.
    assert_int_equal(send(talker, "req", 3, 0), 3);
    char buf[8];
    assert_true(b.spin_until([&] { return recv(talker_fd, buf, sizeof buf, MSG_DONTWAIT) == 3; }));
    srv->settled(talker_fd);
    // The quitter's descriptor is closed by the owner without a word, and
    // its number goes to another file.
    assert_int_equal(close(quitter_fd), 0);
    int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (other != quitter_fd) {
        assert_int_equal(dup2(other, quitter_fd), quitter_fd);
        close(other);
    }
    assert_int_equal(srv->unsettled(), 2);
    assert_false(closed_by_server(idle)); // not before its deadline
    assert_true(b.spin_until([&] { return !expired.empty(); }));
    assert_int_equal(expired.size(), 1);
    assert_int_equal(expired[0], idle_fd);
    assert_int_equal(srv->expired(), 1);
    assert_true(b.spin_until([&] { return closed_by_server(idle); }));
    // Well past the deadline: the settled connection still works, and the
    // other file is untouched.
    b.spin_until([] { return false; }); // 2 s
    assert_int_equal(expired.size(), 1);
    assert_int_equal(srv->unsettled(), 0);
    assert_false(closed_by_server(talker));
    assert_int_equal(send(talker, "more", 4, 0), 4);
    assert_int_equal(recv(talker_fd, buf, sizeof buf, MSG_DONTWAIT), 4);
    assert_true(fcntl(quitter_fd, F_GETFD) >= 0);
    // A connection accepted later gets its own deadline.
    int late = connect_to(b.sock());
    assert_true(b.spin_until([&] { return expired.size() == 2; }));
    assert_true(closed_by_server(late));
    assert_int_equal(srv->expired(), 2);
    // The owner's part: accepted[] holds closed descriptors too.
    b.accepted.clear();
    close(talker_fd);
    close(quitter_fd);
    close(idle);
    close(talker);
    close(quitter);
    close(late);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode_and_credentials),
        cmocka_unit_test(test_stale_replaced),
        cmocka_unit_test(test_unlinked_on_destruction),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_first_request_deadline),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
