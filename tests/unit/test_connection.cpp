// Unit tests of a connection's input path (lib/net/connection.*): frames
// arriving in any pieces (one byte at a time, many in one read, larger than
// an input block) reach the handler whole and in order, and a payload the
// handler keeps (current_payload(), as the engine does with a chunk it
// forwards) stays intact while later frames are read.  Also the send path:
// frames of every size, from a header alone to several MiB, arrive intact.
// A frame other than the hello exchange is refused on its header before
// authentication.  With an AuthOffload, the handshake's munge calls leave
// the loop free, and a refusal found on its thread still closes both ends.  A client closed before its
// handshake ended says how far it had come and when.  A raw socket plays the client,
// with a credential of the fake authenticator (prim_fixture.hpp).
#include "tests/unit/cmocka.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "lib/common/signals.hpp"
#include "lib/net/connection.hpp"
#include "lib/net/frame.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace storm;
using namespace std::chrono_literals;
using prim_fixture::FakeAuth;
using prim_fixture::pattern;

namespace {

struct Received {
    net::MsgType type;
    uint64_t op;
    std::string copy;                 // what the handler saw, copied at once
    std::shared_ptr<const void> kept; // current_payload(), kept
    std::string_view view;            // the payload where it lies, read again at the end
};

// A listening loopback socket on a port the kernel picks; *a is its address.
int listen_loopback(sockaddr_in *a)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    *a = prim_fixture::loopback(0);
    socklen_t len = sizeof *a;
    assert_int_equal(bind(s, reinterpret_cast<sockaddr *>(a), sizeof *a), 0);
    assert_int_equal(listen(s, 1), 0);
    assert_int_equal(getsockname(s, reinterpret_cast<sockaddr *>(a), &len), 0);
    return s;
}

// A server Connection (agent index 0) on a loopback socket, and the raw
// client socket connected to it.
struct Pair {
    event_base *base = event_base_new();
    FakeAuth auth;
    int listener = -1, client = -1;
    std::shared_ptr<net::Connection> server;
    std::vector<Received> got;
    std::string closed;

    explicit Pair(bool hello = true)
    {
        sockaddr_in a;
        listener = listen_loopback(&a);
        client = socket(AF_INET, SOCK_STREAM, 0);
        assert_int_equal(connect(client, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
        int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        assert_true(fd >= 0);
        server = net::Connection::accept(base, fd, 0, auth);
        server->on_frame([this](net::Connection &c, const net::FrameHeader &h, std::string_view p) {
            got.push_back({h.type, h.op, std::string(p), c.current_payload(), p});
        });
        server->on_close([this](net::Connection &, const std::string &why) { closed = why; });
        if (!hello)
            return;
        net::Writer w;
        w.bytes(
            auth.credential("storm:v2:0:4294967295:0123456789abcdef0123456789abcdef:" + read_challenge()));
        write_all(frame(net::MsgType::hello, 0, w.data()));
        run_until([&] { return server->ready(); });
    }
    // The server's first frame, its challenge (the nonce the hello binds).
    std::string read_challenge()
    {
        std::string in;
        run_until([&] {
            char b[256];
            ssize_t n = recv(client, b, sizeof b, MSG_DONTWAIT);
            if (n > 0)
                in.append(b, static_cast<size_t>(n));
            return in.size() >= net::kHeaderSize &&
                   in.size() >= net::kHeaderSize + net::decode_header(in.data()).length;
        });
        net::FrameHeader h = net::decode_header(in.data());
        assert_int_equal(static_cast<int>(h.type), static_cast<int>(net::MsgType::challenge));
        net::Reader r(std::string_view(in).substr(net::kHeaderSize, h.length));
        return std::string(r.bytes(64));
    }
    ~Pair()
    {
        server->close("test over");
        server.reset();
        close(client);
        close(listener);
        event_base_free(base);
    }
    static std::string frame(net::MsgType type, uint64_t op, std::string_view payload)
    {
        std::string f;
        net::encode_frame(f, type, op, payload);
        return f;
    }
    void write_all(std::string_view bytes)
    {
        while (!bytes.empty()) {
            ssize_t n = send(client, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                bytes.remove_prefix(static_cast<size_t>(n));
            else
                event_base_loop(base, EVLOOP_NONBLOCK); // the server reads meanwhile
        }
    }
    template <class F> void run_until(F done)
    {
        auto until = std::chrono::steady_clock::now() + 10s;
        while (!done() && std::chrono::steady_clock::now() < until)
            event_base_loop(base, EVLOOP_NONBLOCK);
        assert_true(done());
    }
};

// Frames of these payload sizes: empty, small, around an input block's
// 256 KiB, and several blocks.
const std::vector<size_t> kSizes = {0, 1, 100, 65536, 262100, 262144, 300000, 3u << 20, 7, 0, 1000};

void check_all(const Pair &p, const std::vector<std::string> &payloads, uint64_t first_op)
{
    assert_int_equal(p.got.size(), payloads.size());
    for (size_t i = 0; i < payloads.size(); ++i) {
        assert_int_equal(p.got[i].op, first_op + i);
        assert_true(p.got[i].copy == payloads[i]);
        // Kept payloads were not written over by the frames read after them.
        assert_true(p.got[i].view == payloads[i]);
    }
}

void test_frames_in_any_pieces(void **)
{
    Pair p;
    std::vector<std::string> payloads;
    std::string stream;
    for (size_t i = 0; i < kSizes.size(); ++i) {
        payloads.push_back(pattern(kSizes[i], static_cast<unsigned>(i)));
        stream += Pair::frame(net::MsgType::xfer, 100 + i, payloads.back());
    }
    // The first frames a byte at a time, each byte read on its own; the
    // rest in pieces of odd sizes.
    size_t off = 0, bytes_alone = net::kHeaderSize * 3 + 101;
    for (; off < bytes_alone; ++off) {
        p.write_all(std::string_view(stream).substr(off, 1));
        for (int k = 0; k < 3; ++k)
            event_base_loop(p.base, EVLOOP_NONBLOCK);
    }
    for (size_t piece = 7; off < stream.size(); piece = piece * 3 + 1) {
        size_t n = std::min(piece, stream.size() - off);
        p.write_all(std::string_view(stream).substr(off, n));
        off += n;
    }
    p.run_until([&] { return p.got.size() == payloads.size() || !p.closed.empty(); });
    assert_true(p.closed.empty());
    check_all(p, payloads, 100);
}

void test_many_frames_in_one_read(void **)
{
    Pair p;
    std::vector<std::string> payloads;
    std::string stream;
    for (unsigned i = 0; i < 500; ++i) {
        payloads.push_back(pattern(i % 37, i));
        stream += Pair::frame(net::MsgType::caw, 1 + i, payloads.back());
    }
    p.write_all(stream);
    p.run_until([&] { return p.got.size() == payloads.size(); });
    check_all(p, payloads, 1);
}

// Flow control: a handler pauses reading at the fifth frame; nothing more
// is handed over however long the loop runs, the sender's socket fills
// (its sends would wait) instead of the receiver's memory, and resuming
// hands over every frame, in order, none lost or repeated.
void test_pause_and_resume_reading(void **)
{
    Pair p;
    std::vector<std::string> payloads;
    std::string stream;
    for (unsigned i = 0; i < 200; ++i) {
        payloads.push_back(pattern(60000 + i, i));
        stream += Pair::frame(net::MsgType::xfer, 1 + i, payloads.back());
    }
    p.server->on_frame([&](net::Connection &c, const net::FrameHeader &h, std::string_view pl) {
        p.got.push_back({h.type, h.op, std::string(pl), c.current_payload(), pl});
        if (p.got.size() == 5)
            c.pause_reading();
    });
    // Write what the socket takes without blocking.
    size_t off = 0;
    for (int idle = 0; off < stream.size() && idle < 50;) {
        ssize_t n = send(p.client, stream.data() + off, stream.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += static_cast<size_t>(n);
            idle = 0;
        } else {
            ++idle;
        }
        event_base_loop(p.base, EVLOOP_NONBLOCK);
    }
    for (int k = 0; k < 100; ++k)
        event_base_loop(p.base, EVLOOP_NONBLOCK);
    assert_true(p.server->reading_paused());
    assert_int_equal(p.got.size(), 5);
    assert_true(off < stream.size()); // the sender was held back
    p.server->resume_reading();
    while (off < stream.size()) {
        ssize_t n = send(p.client, stream.data() + off, stream.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            off += static_cast<size_t>(n);
        event_base_loop(p.base, EVLOOP_NONBLOCK);
    }
    p.run_until([&] { return p.got.size() == payloads.size() || !p.closed.empty(); });
    assert_true(p.closed.empty());
    check_all(p, payloads, 1);
}

void test_send_path(void **)
{
    // A client Connection to a server Connection: sizes from a header
    // alone to several MiB, with data by reference.
    event_base *base = event_base_new();
    FakeAuth auth;
    sockaddr_in a;
    int listener = listen_loopback(&a);
    auto client = net::Connection::connect(base, a, 0, auth);
    std::shared_ptr<net::Connection> server;
    std::vector<std::string> got;
    // Sent before the connection is ready: held, then sent in order.
    client->send(net::MsgType::caw, 1, "early");
    auto until = std::chrono::steady_clock::now() + 10s;
    while (!server && std::chrono::steady_clock::now() < until) {
        int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            server = net::Connection::accept(base, fd, 0, auth);
            server->on_frame([&](net::Connection &, const net::FrameHeader &, std::string_view pl) {
                got.emplace_back(pl);
            });
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
    }
    assert_non_null(server.get());
    std::vector<std::string> want = {"early"};
    for (size_t i = 0; i < kSizes.size(); ++i) {
        auto data = std::make_shared<std::string>(pattern(kSizes[i], 50 + static_cast<unsigned>(i)));
        std::string head = "head" + std::to_string(i);
        client->send(net::MsgType::xfer, 10 + i, head, net::DataRef{data, data->data(), data->size()});
        want.push_back(head + *data);
    }
    until = std::chrono::steady_clock::now() + 10s;
    while (got.size() < want.size() && std::chrono::steady_clock::now() < until)
        event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
        assert_true(got[i] == want[i]);
    // Too big for its type: refused before anything is sent.
    assert_true(test_helpers::contains(test_helpers::error_of<net::FrameError>([&] {
                                           client->send(net::MsgType::caw, 1, std::string(70000, 'x'));
                                       }),
                                       "exceeds the limit"));
    client->close("test over");
    server->close("test over");
    client.reset();
    server.reset();
    close(listener);
    event_base_free(base);
}

void test_truncated_frame_then_eof(void **)
{
    // A peer that dies in the middle of a frame: the connection closes,
    // and the partial frame is never delivered.
    Pair p;
    std::string f = Pair::frame(net::MsgType::xfer, 9, pattern(500000, 3));
    p.write_all(std::string_view(f).substr(0, 300000));
    shutdown(p.client, SHUT_WR);
    p.run_until([&] { return !p.closed.empty(); });
    assert_true(p.got.empty());
    assert_true(test_helpers::contains(p.closed, "closed by"));
}

void test_refused_on_its_header_before_authentication(void **)
{
    // The header of a 16 MiB transfer from a peer that never authenticated:
    // refused at once, without waiting for (or making room for) its payload.
    Pair p(false);
    std::string f = Pair::frame(net::MsgType::xfer, 1, std::string(net::kMaxDataPayload, 'x'));
    p.write_all(std::string_view(f).substr(0, net::kHeaderSize));
    p.run_until([&] { return !p.closed.empty(); });
    assert_true(p.got.empty());
    assert_true(test_helpers::contains(p.closed, "xfer frame before authentication"));
}

// A client and a server Connection over loopback, both handing their
// handshakes' munge calls to `off` (or none); the loop's longest pause
// while they shake hands, timed by a 5 ms timer.
struct Handshake {
    event_base *base = event_base_new();
    FakeAuth auth;
    std::unique_ptr<net::AuthOffload> off;
    std::shared_ptr<net::Connection> client, server;
    std::vector<std::string> got;
    std::string client_closed, server_closed;
    std::chrono::steady_clock::duration longest{};
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();

    Handshake(std::chrono::milliseconds delay, uint32_t server_index, bool offload)
    {
        auth.delay = delay;
        if (offload)
            off = std::make_unique<net::AuthOffload>(base, 4);
        sockaddr_in a;
        int listener = listen_loopback(&a);
        client = net::Connection::connect(base, a, 0, auth, off.get());
        client->on_close([this](net::Connection &, const std::string &why) { client_closed = why; });
        client->send(net::MsgType::caw, 1, "early"); // held until hello_ok
        event *tick = event_new(
            base, -1, EV_PERSIST,
            [](evutil_socket_t, short, void *arg) {
                auto *h = static_cast<Handshake *>(arg);
                auto now = std::chrono::steady_clock::now();
                h->longest = std::max(h->longest, now - h->last);
                h->last = now;
            },
            this);
        timeval tv{0, 5000};
        event_add(tick, &tv);
        auto until = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < until && got.empty() && client_closed.empty() &&
               server_closed.empty()) {
            int fd = server ? -1 : accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                server = net::Connection::accept(base, fd, server_index, auth, false, off.get());
                server->on_frame([this](net::Connection &, const net::FrameHeader &, std::string_view pl) {
                    got.emplace_back(pl);
                });
                server->on_close([this](net::Connection &, const std::string &why) { server_closed = why; });
            }
            event_base_loop(base, EVLOOP_ONCE);
        }
        event_free(tick);
        close(listener);
    }
    ~Handshake()
    {
        if (client)
            client->close("test over");
        if (server)
            server->close("test over");
        client.reset();
        server.reset();
        off.reset();
        event_base_free(base);
    }
};

void test_handshake_off_the_loop(void **)
{
    // munge calls of 400 ms each (a busy munged): four in a handshake.
    // With an offload the loop keeps running meanwhile (its timer never
    // waits a whole call) and the handshake completes, the frame held
    // before hello_ok delivered; on the loop, each call holds it.
    Handshake h(400ms, 0, true);
    assert_true(h.client->ready());
    assert_true(h.server->ready());
    assert_int_equal(h.got.size(), 1);
    assert_true(h.got[0] == "early");
    assert_true(h.off->threads() >= 1);
    assert_true(h.longest < 300ms); // not one whole call (a loaded machine may pause it a little)

    Handshake inline_(400ms, 0, false);
    assert_int_equal(inline_.got.size(), 1);
    assert_true(inline_.longest >= 390ms);
}

void test_handshake_refused_off_the_loop(void **)
{
    // A hello meant for another agent, verified on the offload's thread:
    // refused on the loop with the reason, nothing delivered, the client
    // never ready.
    Handshake h(0ms, 7, true);
    assert_true(h.got.empty());
    assert_true(test_helpers::contains(h.server_closed, "credential meant for agent 0, this is agent 7"));
    assert_false(h.server->ready());
    assert_false(h.client->ready());
}

void test_close_in_the_handshake_names_its_stage(void **)
{
    // An agent that closes a new connection at accept (as it does while
    // too many are unauthenticated): the client says it came before the
    // challenge, when, and which limit that fits.
    {
        event_base *base = event_base_new();
        FakeAuth auth;
        sockaddr_in a;
        int listener = listen_loopback(&a);
        std::string closed;
        auto c = net::Connection::connect(base, a, 3, auth);
        c->on_close([&](net::Connection &, const std::string &why) { closed = why; });
        bool accepted = false;
        auto until = std::chrono::steady_clock::now() + 10s;
        while (closed.empty() && std::chrono::steady_clock::now() < until) {
            int fd = accepted ? -1 : accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                accepted = true;
                close(fd);
            }
            event_base_loop(base, EVLOOP_NONBLOCK);
        }
        assert_true(test_helpers::contains(closed, "connection closed by agent 3 (127.0.0.1:"));
        assert_true(test_helpers::contains(closed, " before its challenge, "));
        assert_true(test_helpers::contains(closed, " s after connecting: an agent closes a new connection at once"));
        assert_true(test_helpers::contains(closed, "while too many others are unauthenticated"));
        c.reset();
        close(listener);
        event_base_free(base);
    }
    // Refused after the hello: the client says so, with the time since its
    // connect and since its hello.
    Handshake h(0ms, 7, true);
    assert_false(h.server_closed.empty());
    h.server.reset(); // its socket closes, as the engine's does
    auto until = std::chrono::steady_clock::now() + 10s;
    while (h.client_closed.empty() && std::chrono::steady_clock::now() < until)
        event_base_loop(h.base, EVLOOP_NONBLOCK);
    assert_true(test_helpers::contains(h.client_closed, "connection closed by agent 0 (127.0.0.1:"));
    assert_true(test_helpers::contains(h.client_closed, " during the handshake, "));
    assert_true(test_helpers::contains(h.client_closed, " s after connecting and "));
    assert_true(test_helpers::contains(h.client_closed,
                                       " s after this node's hello: the agent refused the hello, had not "
                                       "verified it within its hello deadline"));
    assert_false(h.client->ready());
}

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames_in_any_pieces),
        cmocka_unit_test(test_many_frames_in_one_read),
        cmocka_unit_test(test_pause_and_resume_reading),
        cmocka_unit_test(test_send_path),
        cmocka_unit_test(test_truncated_frame_then_eof),
        cmocka_unit_test(test_refused_on_its_header_before_authentication),
        cmocka_unit_test(test_handshake_off_the_loop),
        cmocka_unit_test(test_handshake_refused_off_the_loop),
        cmocka_unit_test(test_close_in_the_handshake_names_its_stage),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
