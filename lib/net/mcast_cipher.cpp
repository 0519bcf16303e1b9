// The sealing of multicast chunks and datagrams (lib/net/mcast.hpp:
// seal_chunk, open_chunk, seal_datagram, open_datagram) and the one place
// that picks the AES-128-GCM backend they use (mcast_cipher.hpp): the first
// usable one of kBackends, or the one select_cipher() chose.
#include "lib/net/mcast_cipher.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/random.h>
#include <system_error>

#include "lib/net/wire.hpp"

namespace storm::net {
namespace {

// Every backend built in, the preferred first.  Intel's library, where it
// is usable (see mcast_cipher_ipsec_mb.cpp for when that pays), else
// OpenSSL, which is always usable.
const CipherBackend *const kBackends[] = {
#ifdef STORM_WITH_IPSEC_MB
    &kIpsecMbBackend,
#endif
    &kOpenSslBackend,
};

const CipherBackend *first_usable()
{
    for (const CipherBackend *b : kBackends)
        if (b->usable())
            return b;
    return &kOpenSslBackend;
}

std::atomic<const CipherBackend *> &in_use()
{
    static std::atomic<const CipherBackend *> b{first_usable()};
    return b;
}

// AES-128-GCM by the backend in use (CipherBackend::gcm has the contract).
bool gcm(bool enc, const unsigned char *key, const unsigned char iv[12], std::string_view aad,
         unsigned char *tag, const char *in, char *out, size_t len)
{
    return in_use().load(std::memory_order_relaxed)->gcm(enc, key, iv, aad, tag, in, out, len);
}

// What seal_chunk and seal_datagram throw when the cipher fails.
std::runtime_error sealing_failed()
{
    std::string why = cipher_backend().error();
    return std::runtime_error("AES-GCM sealing failed" + (why.empty() ? "" : ": " + why));
}

void counter_iv(uint64_t nonce, unsigned char iv[12])
{
    std::memset(iv, 0, 12);
    for (int i = 0; i < 8; ++i)
        iv[4 + i] = static_cast<unsigned char>(nonce >> (56 - 8 * i));
}

} // namespace

const CipherBackend &cipher_backend() { return *in_use().load(); }

Cipher cipher() { return cipher_backend().id; }

std::string cipher_description() { return cipher_backend().describe(); }

bool select_cipher(Cipher c)
{
    for (const CipherBackend *b : kBackends)
        if (b->id == c) {
            if (!b->usable())
                return false;
            in_use().store(b);
            return true;
        }
    return false; // not built in
}

ChunkSeal seal_chunk(const char *data, size_t len, char *out)
{
    ChunkSeal s;
    if (getrandom(s.key, sizeof s.key, 0) != static_cast<ssize_t>(sizeof s.key))
        throw std::system_error(errno, std::generic_category(), "getrandom");
    static const unsigned char zero_iv[12] = {};
    if (!gcm(true, s.key, zero_iv, {}, s.tag, data, out, len))
        throw sealing_failed();
    return s;
}

bool open_chunk(const ChunkSeal &seal, char *data, size_t len)
{
    static const unsigned char zero_iv[12] = {};
    unsigned char tag[kMcastTag];
    std::memcpy(tag, seal.tag, sizeof tag);
    return gcm(false, seal.key, zero_iv, {}, tag, data, data, len);
}

std::string seal_datagram(const unsigned char key[kMcastKey], uint64_t nonce, std::string_view header,
                          std::string_view body)
{
    std::string d(header);
    Writer w;
    w.u64(nonce);
    d += w.data();
    size_t at = d.size();
    d.resize(at + body.size() + kMcastTag);
    unsigned char iv[12];
    counter_iv(nonce, iv);
    unsigned char tag[kMcastTag];
    if (!gcm(true, key, iv, d.substr(0, at), tag, body.data(), d.data() + at, body.size()))
        throw sealing_failed();
    std::memcpy(d.data() + at + body.size(), tag, kMcastTag);
    return d;
}

bool open_datagram(const unsigned char key[kMcastKey], std::string_view d, size_t header_len, uint64_t &nonce,
                   std::string &body)
{
    if (d.size() < header_len + 8 + kMcastTag)
        return false;
    Reader r(d.data() + header_len, 8);
    nonce = r.u64();
    size_t at = header_len + 8, len = d.size() - at - kMcastTag;
    unsigned char iv[12], tag[kMcastTag];
    counter_iv(nonce, iv);
    std::memcpy(tag, d.data() + at + len, kMcastTag);
    body.resize(len);
    return gcm(false, key, iv, d.substr(0, at), tag, d.data() + at, body.data(), len);
}

} // namespace storm::net
