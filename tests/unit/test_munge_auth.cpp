// Unit tests of munge authentication (lib/net/munge_auth.*) against two
// private munged daemons with different keys, started in a scratch
// directory: round trip, payload binding, forged, tampered, replayed and
// foreign-key credentials (skipped where munged cannot run: not root); and
// a socket whose backlog is full, tried again before it fails.
#include "tests/unit/cmocka.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "lib/net/munge_auth.hpp"
#include "tests/unit/helpers.hpp"

using storm::net::AuthError;
using storm::net::MungeAuth;

namespace {

std::string g_dir;

std::string start_munged(const char *name)
{
    std::string d = g_dir + "/" + name;
    std::string cmd = "set -e; mkdir -p " + d + "; chmod 755 " + d + "; dd if=/dev/urandom of=" + d +
                      "/key bs=128 count=1 status=none; chmod 600 " + d + "/key; munged --socket=" + d +
                      "/sock --key-file=" + d + "/key --pid-file=" + d + "/pid --log-file=" + d +
                      "/log --seed-file=" + d + "/seed; for i in $(seq 50); do munge -S " + d +
                      "/sock -n 2>/dev/null | unmunge -S " + d +
                      "/sock >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1";
    if (std::system(cmd.c_str()) != 0)
        return "";
    return d + "/sock";
}

int setup(void **)
{
    if (geteuid() != 0 || std::system("command -v munged >/dev/null 2>&1") != 0)
        return 0;
    char tmpl[] = "/tmp/storm-munge-test.XXXXXX";
    if (!mkdtemp(tmpl))
        return -1;
    chmod(tmpl, 0755);
    g_dir = tmpl;
    return 0;
}

int teardown(void **)
{
    if (!g_dir.empty()) {
        std::string cmd = "for p in " + g_dir +
                          "/*/pid; do [ -f $p ] && kill $(cat $p); done 2>/dev/null; sleep 0.2; rm -rf " +
                          g_dir;
        std::system(cmd.c_str());
    }
    return 0;
}

using test_helpers::contains;
template <class F> std::string auth_error(F f) { return test_helpers::error_of<AuthError>(f); }

void test_socket_from_authinfo(void **)
{
    assert_string_equal(MungeAuth::socket_from_authinfo(nullptr).c_str(), "");
    assert_string_equal(MungeAuth::socket_from_authinfo("ttl=60").c_str(), "");
    assert_string_equal(MungeAuth::socket_from_authinfo("socket=/run/m.sock").c_str(), "/run/m.sock");
    assert_string_equal(MungeAuth::socket_from_authinfo("ttl=60,socket=/x/y").c_str(), "/x/y");
}

void test_credentials(void **)
{
    if (g_dir.empty())
        skip();
    std::string sock_a = start_munged("a"), sock_b = start_munged("b");
    assert_false(sock_a.empty());
    assert_false(sock_b.empty());
    MungeAuth a(sock_a), b(sock_b);

    // Round trip: payload and identity come back.
    std::string cred = a.encode("storm-agent:hello:7");
    auto c = a.decode(cred);
    assert_string_equal(c.payload.c_str(), "storm-agent:hello:7");
    assert_int_equal(c.uid, geteuid());
    assert_int_equal(c.gid, getegid());

    // Replayed: the same credential a second time.
    assert_true(contains(auth_error([&] { a.decode(cred); }), "Replayed"));

    // Another munge realm (another key): rejected.
    std::string foreign = b.encode("storm-agent:hello:8");
    assert_false(auth_error([&] { a.decode(foreign); }).empty());

    // Tampered with: one character of the body changed.
    std::string t = a.encode("x");
    size_t mid = t.size() / 2;
    t[mid] = t[mid] == 'A' ? 'B' : 'A';
    assert_false(auth_error([&] { a.decode(t); }).empty());

    // Forged: not a credential at all, or with a NUL byte.
    assert_false(auth_error([&] { a.decode("MUNGE:not-a-credential:"); }).empty());
    assert_false(auth_error([&] { a.decode(""); }).empty());
    assert_true(contains(auth_error([&] { a.decode(std::string("MUNGE:\0x", 8)); }), "NUL"));

    // No munged behind the socket: a clear error, not a hang.
    MungeAuth none(g_dir + "/absent.sock");
    assert_true(contains(auth_error([&] { none.encode("x"); }), "munge encode failed"));
}

// munged's socket with its backlog full: every connection fails at once
// ("Resource temporarily unavailable"); the call is tried again for about
// half a second (5 s off an event loop), then fails saying so.
void test_full_backlog(void **)
{
    char tmpl[] = "/tmp/storm-munge-full.XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    std::string path = std::string(tmpl) + "/sock";
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    assert_int_equal(bind(l, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
    assert_int_equal(listen(l, 0), 0);
    std::vector<int> queued; // never accepted: they fill the backlog
    for (;;) {
        int c = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (connect(c, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
            close(c);
            break;
        }
        queued.push_back(c);
    }
    MungeAuth busy(path);
    auto t0 = std::chrono::steady_clock::now();
    std::string err = auth_error([&] { busy.decode("MUNGE:x:"); });
    auto took = std::chrono::steady_clock::now() - t0;
    assert_true(contains(err, "Resource temporarily unavailable"));
    assert_true(contains(err, "all 8 attempts"));
    assert_true(took >= std::chrono::milliseconds(400));
    assert_true(took < std::chrono::milliseconds(1500));
    // Off an event loop (a broadcast's worker), munged is waited for 5 s,
    // or as long as the caller gives, 5 s at least.
    using storm::net::Patience;
    assert_true(Patience::worker.budget == std::chrono::seconds(5));
    assert_true(Patience::worker_for(std::chrono::seconds(1)).budget == std::chrono::seconds(5));
    assert_false(Patience::worker_for(std::chrono::seconds(1)).on_loop);
    t0 = std::chrono::steady_clock::now();
    err = auth_error(
        [&] { busy.decode_allow_replay("MUNGE:x:", Patience::worker_for(std::chrono::seconds(6))); });
    took = std::chrono::steady_clock::now() - t0;
    assert_true(contains(err, "Resource temporarily unavailable"));
    assert_true(contains(err, "attempts in 6."));
    assert_true(took >= std::chrono::milliseconds(6000) && took < std::chrono::milliseconds(7500));
    for (int c : queued)
        close(c);
    close(l);
    unlink(path.c_str());
    rmdir(tmpl);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_socket_from_authinfo),
        cmocka_unit_test(test_credentials),
        cmocka_unit_test(test_full_backlog),
    };
    return cmocka_run_group_tests_name("munge_auth", tests, setup, teardown);
}
