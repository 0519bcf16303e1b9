// One TCP connection between Storm daemons, on a libevent loop: framing,
// validation and authentication.  (Flow control is the engine's: a window
// of chunks in flight per transfer.)
//
// Life cycle: the server side, made by accept(), first sends a challenge:
// a fresh random nonce.  A client Connection, made by connect(), answers
// with a hello frame carrying a credential bound to the peer it wants, its
// own nonce and the server's ("storm:v2:<to>:<from>:<nonce>:<challenge>"):
// a hello captured elsewhere (by a program that bound the port while the
// agent was down) does not answer another connection's challenge, and is
// refused.  The server verifies it, answers hello_ok (a credential bound to
// both nonces) and only then delivers frames.
// Any framing error, an unexpected frame before authentication, a failed
// verification, EOF or a socket error closes the connection: the close
// handler runs once, with the reason, and nothing more is delivered.
// With an AuthOffload, the munge calls of the handshake run on its threads
// (auth_offload.hpp: a slow munged never holds the loop), and the
// connection reads nothing meanwhile; without one, on the loop.
//
// I/O: a frame sent while nothing is queued goes to the kernel at once
// (one sendmsg of header, payload and referenced data; the rest, if any, is
// queued on a bufferevent, which also connects and reports errors); each
// readable event is one read into an input block, whose frames are handed
// to the handler where they lie, without a copy or an allocation.  Small
// frames thus cost one system call each way and no memory management,
// which matters on nodes that wake for every message.
//
// Ownership: Connections are owned by shared_ptr (the engine's tables).
// Handlers get a reference valid for the duration of the call; a handler
// may close the connection or drop the engine's reference, and the object
// stays alive until the callback returns (the connection keeps itself alive
// while libevent may call it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <string_view>

#include "lib/net/auth_offload.hpp"
#include "lib/net/authenticator.hpp"
#include "lib/net/frame.hpp"

struct bufferevent;
struct evbuffer;
struct event;
struct event_base;

namespace storm::net {

// Bytes appended to a frame by reference, without a copy: `owner` keeps
// them alive until the kernel has taken them.
struct DataRef {
    std::shared_ptr<const void> owner;
    const char *ptr = nullptr;
    size_t len = 0;
};

// A hello's credential payload, "storm:v2:<to>:<from>:<nonce>:<challenge>"
// (nonces in lowercase hex, at most 64 digits), into its fields; false if
// it is anything else.
bool parse_hello(const std::string &payload, uint32_t &to, uint32_t &from, std::string &nonce,
                 std::string &challenge);

class Connection : public std::enable_shared_from_this<Connection> {
public:
    using FrameHandler = std::function<void(Connection &, const FrameHeader &, std::string_view payload)>;
    using CloseHandler = std::function<void(Connection &, const std::string &why)>;
    using ReadyHandler = std::function<void(Connection &)>;

    // Starts a non-blocking connect to `addr`, as the agent with index
    // `peer` expects.  on_ready runs once hello_ok arrives (and is
    // verified).  `offload`, if given, outlives the connection's handshake.
    static std::shared_ptr<Connection> connect(event_base *base, const sockaddr_in &addr, uint32_t peer,
                                               Authenticator &auth, AuthOffload *offload = nullptr);
    // Wraps an accepted socket; `self` is this agent's index, which the
    // client's credential must name.  With `users`, a client whose
    // credential is a user's (not a daemon's) is accepted as untrusted
    // (its frames are the receiver's to filter); without, it is refused.
    // A server must always prove a daemon's identity to its client.
    static std::shared_ptr<Connection> accept(event_base *base, int fd, uint32_t self, Authenticator &auth,
                                              bool users = false, AuthOffload *offload = nullptr);

    ~Connection();

    void on_frame(FrameHandler h) { frame_handler_ = std::move(h); }
    void on_close(CloseHandler h) { close_handler_ = std::move(h); }
    void on_ready(ReadyHandler h) { ready_handler_ = std::move(h); }

    // Queues a frame (may be called before the connection is ready: frames
    // are held until hello_ok).  Throws FrameError if the payload is too big.
    void send(MsgType type, uint64_t op, std::string_view payload);
    // A frame whose payload is `head` followed by `data` (not copied).
    void send(MsgType type, uint64_t op, std::string_view head, const DataRef &data);
    // The payload being delivered to the frame handler, shared: a handler
    // may keep it (or views into it) beyond the call.
    const std::shared_ptr<const void> &current_payload() const noexcept { return current_; }
    void close(const std::string &why);
    // Flow control of what the peer sends: while paused, nothing more is
    // read from the socket nor handed to the frame handler (the kernel's
    // buffers fill, and then the peer's sends wait).  A frame handler may
    // pause; resuming hands over the frames already read first.
    void pause_reading();
    void resume_reading();
    bool reading_paused() const noexcept { return paused_; }
    // close(), and the peer learns at once (a reset, once the connection is
    // destroyed): what is still queued towards it, here or in the kernel,
    // is dropped rather than sent first.
    void reset(const std::string &why);

    bool ready() const noexcept { return ready_; }
    bool closed() const noexcept { return closed_; }
    // The peer closed it in order (EOF), as opposed to an error or a rejection.
    bool closed_by_peer() const noexcept { return closed_by_peer_; }
    // The socket error that closed it (ECONNREFUSED, ETIMEDOUT, ...), 0 if
    // none did.
    int error() const noexcept { return error_; }
    uint32_t peer() const noexcept { return peer_; }
    // The peer's verified uid, and whether it is a daemon's.
    uid_t peer_uid() const noexcept { return peer_uid_; }
    bool trusted() const noexcept { return trusted_; }
    const std::string &describe() const noexcept { return name_; }

private:
    Connection(event_base *base, bufferevent *bev, Authenticator &auth, bool client, uint32_t index);
    void watch_reads();
    static void on_readable(int fd, short what, void *arg);
    static void event_cb(bufferevent *bev, short what, void *arg);
    void handle_input();
    struct Hello {
        uint32_t to, from;
        std::string nonce, challenge;
    };
    // What a handshake's munge calls produce (off the loop, with an
    // offload), applied on the loop: nothing of the connection is touched
    // before.  authenticate() runs `work` and applies its result; an
    // error `work` throws, or AuthError the result throws, closes the
    // connection with the reason (apply_auth, the one place that does).
    using Apply = std::function<void(Connection &)>;
    void authenticate(std::function<Apply()> work);
    void apply_auth(const Apply &apply);
    static Hello parse_verified(const Authenticator::Verified &v);
    // On the loop, with the munge calls' results: the checks, then ready.
    // Throw AuthError.
    void accept_hello(uid_t uid, const Hello &h, const std::string &hello_ok);
    void accept_hello_ok(uid_t uid, const Hello &h);
    void update_reads();
    // Nothing is read while the connection is closed, paused by its
    // handler, or waiting for a handshake's munge call.
    bool reads_held() const { return closed_ || paused_ || authenticating_; }
    void handle_challenge(std::string_view payload);
    void handle_hello(std::string_view payload);
    void handle_hello_ok(std::string_view payload);
    void flush_held();
    // The peer closed it in order (EOF); a socket error `err` closed it.
    void close_by_peer();
    void close_on_error(int err);
    // For a client's close before hello_ok, how far the handshake had come
    // and when (" during the handshake, 12.3 s after connecting and 0.1 s
    // after this node's hello: ..."), with the limits of the peer that fit
    // it (at accept: its cap on unauthenticated connections; after: its
    // hello deadline); "" otherwise.
    std::string handshake_stage() const;
    // Sends header, head and data (may be null) in this order.
    void write_now(const char *header, std::string_view head, const DataRef *data);
    // Makes room in the input block to read into (see in_).  Throws
    // std::bad_alloc.
    void prepare_input();

    event_base *base_;
    bufferevent *bev_;
    int fd_;               // bev_'s socket, and its output buffer, asked once:
    evbuffer *out_;        // each of libevent's getters takes the bufferevent's lock
    event *rev_ = nullptr; // reads (the bufferevent writes)
    // What was read: bytes [in_begin_, in_end_) of in_ (capacity in_cap_)
    // are not framed yet; the frame there needs in_need_ bytes in all once
    // its header is known (0 before).  Payloads handed to the handler alias
    // in_ (current_payload()), so the block is written over (compacted or
    // reused from its start) only while nobody else holds it; a handler
    // that keeps a payload makes the next read start a new block.
    std::shared_ptr<char[]> in_;
    size_t in_cap_ = 0, in_begin_ = 0, in_end_ = 0, in_need_ = 0;
    Authenticator &auth_;
    bool client_;
    uint32_t peer_; // client: the server's index; server: set from the credential
    uint32_t self_; // server: own index
    bool ready_ = false;
    bool closed_ = false;
    bool paused_ = false;
    bool closed_by_peer_ = false;
    int error_ = 0;
    bool users_ = false;
    AuthOffload *offload_ = nullptr;
    bool authenticating_ = false; // a handshake's munge call is at work: nothing is read
    uid_t peer_uid_ = static_cast<uid_t>(-1);
    bool trusted_ = false;
    std::chrono::steady_clock::time_point started_; // client: connect()
    std::chrono::steady_clock::time_point hello_sent_{}; // client: its hello went out (epoch: not yet)
    std::string nonce_;     // client: its own nonce
    std::string challenge_; // server: the nonce it sent; client: the one it answered
    bool challenged_ = false;
    std::string held_; // frames queued before hello_ok (client)
    std::shared_ptr<const void> current_;
    std::string name_;
    std::shared_ptr<Connection> self_ref_; // alive while libevent holds us
    FrameHandler frame_handler_;
    CloseHandler close_handler_;
    ReadyHandler ready_handler_;
};

} // namespace storm::net
