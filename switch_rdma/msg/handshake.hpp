// How two tasks of a context open their connection (frames.hpp has what
// follows): each proves to the other that it knows the context's key
// (Context::key, which slurmctld draws and only the step's tasks receive),
// without sending it, over a nonce the other side has just drawn, so that
// a hello seen once (or captured) opens nothing again.
//
// Rank i connects to rank j < i (frames.hpp):
//   j -> i  Challenge {magic, order, nonce_j}           at once on accept
//   i -> j  Hello {magic, order, id, job, step, src=i, dst=j, packet_size,
//                  nonce_i, mac = HMAC-SHA256(key, "storm-msg hello" ||
//                  nonce_j || the hello's bytes before mac)}
//   j -> i  HelloAck {magic, ok=1, mac = HMAC-SHA256(key, "storm-msg ack"
//                  || nonce_j || the hello's bytes before mac)}
// j checks the hello (check_hello) and answers, or closes the connection
// without a word; i checks the answer (check_ack), which proves that j,
// not a process that bound j's port first, holds the key.  Nonces are 32
// bytes of RAND_bytes; MACs are compared with CRYPTO_memcmp.  Fields are
// in the senders' byte order (`order` rejects another).
//
// Versions: the magic names the frame format's version ("STM" and a
// digit, frames.hpp).  Versions 1 and 2 had no challenge and a hello of
// the first 32 bytes only, with no proof: the acceptor refuses them,
// naming the version.  A context without a key (format version 3 or
// older, context.hpp) cannot be proved: libstormmsg refuses to connect
// its tasks at all (endpoint.cpp).
//
// Contract: nothing here does I/O; make_* throw std::runtime_error when no
// random bytes can be drawn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "switch_rdma/context.hpp"
#include "switch_rdma/msg/frames.hpp"

namespace storm::rdma::msg {

constexpr size_t nonce_bytes = 32;
constexpr size_t mac_bytes = 32; // HMAC-SHA256

struct Challenge {
    uint32_t magic; // hello_magic
    uint32_t order; // byte_order
    uint8_t nonce[nonce_bytes];
};
struct Hello {
    uint32_t magic;
    uint32_t order;
    uint32_t id, job, step;
    uint32_t src, dst;
    uint32_t packet_size;
    uint8_t nonce[nonce_bytes]; // the connector's, which the acceptor's answer covers
    uint8_t mac[mac_bytes];
};
struct HelloAck {
    uint32_t magic;
    uint32_t ok; // 1
    uint8_t mac[mac_bytes];
};
static_assert(sizeof(Challenge) == 40 && sizeof(Hello) == 96 && sizeof(HelloAck) == 40,
              "the handshake's messages are packed by hand");
// A version 1 or 2 hello: Hello's first 32 bytes (up to packet_size).
constexpr size_t old_hello_size = 32;

// The acceptor's challenge, with a fresh nonce.
Challenge make_challenge();
// The connector's hello to `dst` for challenge `c`, with a fresh nonce of
// its own, proving ctx.key (which must not be empty).
Hello make_hello(const Context &ctx, uint32_t src, uint32_t dst, uint32_t packet_size, const Challenge &c);
// The acceptor's answer to a hello check_hello() accepted.
HelloAck make_ack(const std::string &key, const Challenge &c, const Hello &h);

// The acceptor's verdict on the first `got` bytes of a hello (got <=
// sizeof(Hello)) it received after sending `c`.
struct Verdict {
    enum What { more, refused, accepted } what;
    std::string why; // refused: the reason, naming the claimed rank
};
// Accepted: a complete hello of this context's step (id, job, step), of
// this version and byte order, to `self`, of `packet_size`, whose MAC
// proves the context's key over c's nonce.  The caller still checks that
// hello.src is a rank it expects (above its own, not connected yet).  A
// context without a key accepts nothing.  Refusals come as early as the
// bytes allow (a foreign magic after 4 bytes, an old version after 32).
Verdict check_hello(const Hello &h, size_t got, const Challenge &c, const Context &ctx, uint32_t self,
                    uint32_t packet_size);
// The connector's checks: "" if the challenge is of this version and byte
// order, else why not; true if the answer to `h` proves the key.
std::string check_challenge(const Challenge &c);
bool check_ack(const HelloAck &a, const std::string &key, const Challenge &c, const Hello &h);

} // namespace storm::rdma::msg
