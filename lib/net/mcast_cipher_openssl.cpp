// The OpenSSL backend of AES-128-GCM (mcast_cipher.hpp has the contract of
// each member): libcrypto, loaded on first use.  Always built; in use where
// Intel's library is not.
#include <algorithm>
#include <cstring>
#include <dlfcn.h>
#include <type_traits>

#include <openssl/evp.h>
#include <openssl/opensslv.h>

#include "lib/net/mcast_cipher.hpp"

namespace storm::net {
namespace {

// libcrypto, loaded on first use rather than linked: of the processes
// that load Storm's plugins, only the node agents (slurmd) and the machine
// manager (slurmctld) seal anything, and loading libcrypto cost every
// slurmstepd and srun about 1.2 ms, a third of what Storm adds to a step's
// start on a node.  The functions are the ones of the headers compiled
// against (the same major version's library).
struct Crypto {
    decltype(&EVP_CIPHER_CTX_new) ctx_new = nullptr;
    decltype(&EVP_CIPHER_CTX_free) ctx_free = nullptr;
    decltype(&EVP_CIPHER_fetch) fetch = nullptr;
    decltype(&EVP_CipherInit_ex) init = nullptr;
    decltype(&EVP_CipherUpdate) update = nullptr;
    decltype(&EVP_CipherFinal_ex) final = nullptr;
    decltype(&EVP_CIPHER_CTX_ctrl) ctrl = nullptr;
    std::string error; // why it could not be loaded ("" when loaded)
};

const Crypto &crypto()
{
    static const Crypto c = [] {
        Crypto c;
        std::string name = "libcrypto.so." + std::to_string(OPENSSL_VERSION_MAJOR);
        void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            c.error = "cannot load " + name + ": " + (e ? e : "unknown error");
            return c;
        }
        auto get = [&](auto &fn, const char *sym) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, sym));
            if (!fn && c.error.empty())
                c.error = name + " has no " + sym;
        };
        get(c.ctx_new, "EVP_CIPHER_CTX_new");
        get(c.ctx_free, "EVP_CIPHER_CTX_free");
        get(c.fetch, "EVP_CIPHER_fetch");
        get(c.init, "EVP_CipherInit_ex");
        get(c.update, "EVP_CipherUpdate");
        get(c.final, "EVP_CipherFinal_ex");
        get(c.ctrl, "EVP_CIPHER_CTX_ctrl");
        return c; // the library stays loaded for the process's life
    }();
    return c;
}

struct CipherCtx {
    EVP_CIPHER_CTX *ctx = crypto().error.empty() ? crypto().ctx_new() : nullptr;
    ~CipherCtx()
    {
        if (ctx)
            crypto().ctx_free(ctx);
    }
};

bool gcm(bool enc, const unsigned char *key, const unsigned char iv[12], std::string_view aad,
         unsigned char *tag, const char *in, char *out, size_t len)
{
    // The cipher is fetched once, and the key schedule kept while the same
    // key comes back (a table's strobes): then only the IV is set.  Chunks
    // bring a new key each.
    const Crypto &k = crypto();
    if (!k.error.empty())
        return false;
    static EVP_CIPHER *const aes = k.fetch(nullptr, "AES-128-GCM", nullptr);
    static thread_local CipherCtx c;
    static thread_local unsigned char last_key[kMcastKey];
    static thread_local int last_enc = -1;
    if (!c.ctx || !aes)
        return false;
    if (last_enc == (enc ? 1 : 0) && std::memcmp(last_key, key, kMcastKey) == 0) {
        if (k.init(c.ctx, nullptr, nullptr, nullptr, iv, enc ? 1 : 0) != 1)
            return false;
    } else {
        last_enc = -1;
        if (k.init(c.ctx, aes, nullptr, key, iv, enc ? 1 : 0) != 1)
            return false;
        std::memcpy(last_key, key, kMcastKey);
        last_enc = enc ? 1 : 0;
    }
    if (!aad.empty()) {
        int outl = 0;
        if (k.update(c.ctx, nullptr, &outl, reinterpret_cast<const unsigned char *>(aad.data()),
                     static_cast<int>(aad.size())) != 1)
            return false;
    }
    size_t done = 0;
    while (done < len) { // EVP takes int lengths
        int n = static_cast<int>(std::min<size_t>(len - done, 1u << 30)), outl = 0;
        if (k.update(c.ctx, reinterpret_cast<unsigned char *>(out + done), &outl,
                     reinterpret_cast<const unsigned char *>(in + done), n) != 1)
            return false;
        done += static_cast<size_t>(n);
    }
    if (!enc && k.ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kMcastTag, tag) != 1)
        return false;
    int outl = 0;
    unsigned char end[16];
    if (k.final(c.ctx, end, &outl) != 1)
        return false; // decryption: the tag did not match
    if (enc && k.ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kMcastTag, tag) != 1)
        return false;
    return true;
}

bool usable() { return true; }

std::string error() { return crypto().error; }

std::string describe() { return "OpenSSL (libcrypto.so." + std::to_string(OPENSSL_VERSION_MAJOR) + ")"; }

} // namespace

extern const CipherBackend kOpenSslBackend = {Cipher::openssl, usable, error, describe, gcm};

} // namespace storm::net
