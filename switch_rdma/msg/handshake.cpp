#include "switch_rdma/msg/handshake.hpp"

#include <cstring>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdexcept>

namespace storm::rdma::msg {

namespace {

// What each MAC covers: its label (NUL included), the challenge's nonce,
// the hello up to its MAC.
constexpr char kHelloLabel[] = "storm-msg hello";
constexpr char kAckLabel[] = "storm-msg ack";
constexpr size_t kHelloSigned = offsetof(Hello, mac);

void random_bytes(uint8_t *out, size_t n)
{
    if (RAND_bytes(out, static_cast<int>(n)) != 1)
        throw std::runtime_error("no random bytes for the connection's nonce (RAND_bytes failed)");
}

void mac(const char *label, size_t label_len, const std::string &key, const Challenge &c, const Hello &h,
         uint8_t out[mac_bytes])
{
    std::string data(label, label_len);
    data.append(reinterpret_cast<const char *>(c.nonce), nonce_bytes);
    data.append(reinterpret_cast<const char *>(&h), kHelloSigned);
    unsigned int len = 0;
    if (key.empty() ||
        !HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
              reinterpret_cast<const uint8_t *>(data.data()), data.size(), out, &len) ||
        len != mac_bytes)
        throw std::runtime_error("HMAC-SHA256 failed");
}

bool same(const uint8_t *a, const uint8_t *b) { return CRYPTO_memcmp(a, b, mac_bytes) == 0; }

} // namespace

Challenge make_challenge()
{
    Challenge c{hello_magic, byte_order, {}};
    random_bytes(c.nonce, sizeof c.nonce);
    return c;
}

Hello make_hello(const Context &ctx, uint32_t src, uint32_t dst, uint32_t packet_size, const Challenge &c)
{
    Hello h{hello_magic, byte_order, ctx.id, ctx.job_id, ctx.step_id, src, dst, packet_size, {}, {}};
    random_bytes(h.nonce, sizeof h.nonce);
    mac(kHelloLabel, sizeof kHelloLabel, ctx.key, c, h, h.mac);
    return h;
}

HelloAck make_ack(const std::string &key, const Challenge &c, const Hello &h)
{
    HelloAck a{hello_magic, 1, {}};
    mac(kAckLabel, sizeof kAckLabel, key, c, h, a.mac);
    return a;
}

Verdict check_hello(const Hello &h, size_t got, const Challenge &c, const Context &ctx, uint32_t self,
                    uint32_t packet_size)
{
    auto refuse = [](std::string why) { return Verdict{Verdict::refused, std::move(why)}; };
    bool old = h.magic == hello_magic_v1 || h.magic == hello_magic_v2;
    if (got >= sizeof h.magic && !old && h.magic != hello_magic)
        return refuse("not a libstormmsg peer of this byte order");
    if (got >= old_hello_size && old)
        return refuse("rank " + std::to_string(h.src) + " speaks frame version " +
                      (h.magic == hello_magic_v1 ? "1" : "2") + ", this task version " +
                      std::to_string(frame_version) +
                      " (the step's tasks use different libstormmsg versions; versions before 3 do not "
                      "prove the context's key)");
    if (got < sizeof h)
        return Verdict{Verdict::more, {}};
    std::string who = "rank " + std::to_string(h.src);
    if (h.order != byte_order)
        return refuse("not a libstormmsg peer of this byte order");
    if (h.id != ctx.id || h.job != ctx.job_id || h.step != ctx.step_id)
        return refuse("context " + std::to_string(h.id) + " of step " + std::to_string(h.job) + "." +
                      std::to_string(h.step) + " is not this one");
    if (ctx.key.empty())
        return refuse("the context has no key to check " + who + "'s hello with");
    uint8_t want[mac_bytes];
    mac(kHelloLabel, sizeof kHelloLabel, ctx.key, c, h, want);
    if (!same(want, h.mac))
        return refuse(who + "'s hello does not prove the context's key (a forged or replayed hello)");
    if (h.dst != self)
        return refuse("unexpected ranks " + std::to_string(h.src) + " -> " + std::to_string(h.dst));
    if (h.packet_size != packet_size)
        return refuse(who + "'s packet size " + std::to_string(h.packet_size) + " differs");
    return Verdict{Verdict::accepted, {}};
}

std::string check_challenge(const Challenge &c)
{
    if (c.magic == hello_magic && c.order == byte_order)
        return "";
    return "not a libstormmsg peer of frame version " + std::to_string(frame_version) +
           " and this byte order";
}

bool check_ack(const HelloAck &a, const std::string &key, const Challenge &c, const Hello &h)
{
    if (a.magic != hello_magic || a.ok != 1 || key.empty())
        return false;
    uint8_t want[mac_bytes];
    mac(kAckLabel, sizeof kAckLabel, key, c, h, want);
    return same(want, a.mac);
}

} // namespace storm::rdma::msg
