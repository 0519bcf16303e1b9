// The AES-128-GCM backends behind the sealing of multicast chunks and
// datagrams (lib/net/mcast.hpp: seal_chunk, seal_datagram, cipher()).
// Private to lib/net.
//
// A backend is one constant table (in the manner of munge's cipher.c and
// libevent's struct eventop): what it is called, whether this process can
// use it, and the cipher itself.  Both backends load their library with
// dlopen on first use, never at link time, and both compute the same
// standard AES-128-GCM: nodes that use either one understand each other.
//  - kOpenSslBackend (mcast_cipher_openssl.cpp): libcrypto; always built.
//  - kIpsecMbBackend (mcast_cipher_ipsec_mb.cpp): Intel's multi-buffer
//    crypto library; built where configure found its header
//    (STORM_WITH_IPSEC_MB, --without-ipsec-mb turns it off).
// mcast_cipher.cpp picks the one in use (cipher_backend()), and is the
// only place that does.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "lib/net/mcast.hpp"

namespace storm::net {

struct CipherBackend {
    // What cipher() reports while this backend is in use.
    Cipher id;

    // Whether the backend may be chosen in this process: for Intel's
    // library, that it loads and has its VAES code for this CPU.  OpenSSL's
    // is always true: it is the one chosen where no other is, and error()
    // says when it cannot work.  The first call may load the library;
    // thread safe.
    bool (*usable)();

    // Why sealing cannot work with this backend in this process ("" when
    // it can), for the errors of Mcast's constructor and of the sealing
    // functions.  Thread safe.
    std::string (*error)();

    // The backend's name for logs, e.g. "OpenSSL (libcrypto.so.3)" or
    // "intel-ipsec-mb 1.3.0 (VAES, AVX-512)".
    std::string (*describe)();

    // AES-128-GCM of `len` bytes from `in` to `out` under `key` (kMcastKey
    // bytes) and the 12-byte `iv`; `aad` is authenticated, not encrypted.
    // Sealing (enc true) writes the kMcastTag bytes of `tag`; opening (enc
    // false) checks them and writes the plaintext whatever the outcome.
    // `out` may be `in`.  False if the cipher failed or, opening, the tag
    // did not match.  A key must never seal two messages under one IV: the
    // callers give chunks a fresh key each and a zero IV, datagrams a shared
    // key and a counter.  Thread safe: each thread keeps its own context,
    // and the last key's schedule while the same key comes back (a table's
    // strobes).
    bool (*gcm)(bool enc, const unsigned char *key, const unsigned char iv[12], std::string_view aad,
                unsigned char *tag, const char *in, char *out, size_t len);
};

extern const CipherBackend kOpenSslBackend;
#ifdef STORM_WITH_IPSEC_MB
extern const CipherBackend kIpsecMbBackend;
#endif

// The backend in use: the first usable one of Intel's library and OpenSSL,
// unless select_cipher() chose another.
const CipherBackend &cipher_backend();

} // namespace storm::net
