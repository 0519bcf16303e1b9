// Unit tests of a connection's input path (lib/net/connection.*): frames
// arriving in any pieces (one byte at a time, many in one read, larger than
// an input block) reach the handler whole and in order, and a payload the
// handler keeps (current_payload(), as the engine does with a chunk it
// forwards) stays intact while later frames are read.  Also the send path:
// frames of every size, from a header alone to several MiB, arrive intact.
// A frame other than the hello exchange is refused on its header before
// authentication.  A raw socket plays the client, with a credential of the
// fake authenticator (prim_fixture.hpp).
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
        w.bytes(auth.credential("storm:v1:0:4294967295:nonce"));
        write_all(frame(net::MsgType::hello, 0, w.data()));
        run_until([&] { return server->ready(); });
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
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
