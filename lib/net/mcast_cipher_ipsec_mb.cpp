// The backend of AES-128-GCM by Intel's multi-buffer crypto library
// (mcast_cipher.hpp has the contract of each member): libIPSec_MB.so.1,
// loaded on first use.  Built only where configure found its header
// (STORM_WITH_IPSEC_MB); usable where the library loads and chooses its
// VAES code for this CPU, and then the backend in use.
#ifdef STORM_WITH_IPSEC_MB

#include <cstdint>
#include <cstring>
#include <dlfcn.h>

#include <intel-ipsec-mb.h>

#include "lib/net/mcast_cipher.hpp"

namespace storm::net {
namespace {

// Intel's multi-buffer crypto library, loaded on first use as libcrypto is.
// On CPUs with VAES and VPCLMULQDQ its AES-GCM runs on AVX-512 registers,
// which OpenSSL 3.0 does not do: 15.7 against 5.7 GB/s on 256 KiB chunks
// on this project's test machine, where every agent opens every byte of a
// multicast broadcast.  Elsewhere OpenSSL is as fast, and stays in use.
// Both compute the same standard AES-128-GCM: nodes that use either one
// understand each other.
struct Imb {
    decltype(&alloc_mb_mgr) alloc = nullptr;
    decltype(&init_mb_mgr_auto) init = nullptr;
    decltype(&free_mb_mgr) free = nullptr;
    decltype(&imb_get_errno) error = nullptr;
    std::string name;         // for the log: "intel-ipsec-mb 1.3.0 (VAES, AVX-512)"
    bool vaes_avx512 = false; // the library chose its VAES code here
};

const Imb &imb()
{
    static const Imb i = [] {
        Imb i;
        void *h = dlopen("libIPSec_MB.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h)
            return i;
        i.alloc = reinterpret_cast<decltype(i.alloc)>(dlsym(h, "alloc_mb_mgr"));
        i.init = reinterpret_cast<decltype(i.init)>(dlsym(h, "init_mb_mgr_auto"));
        i.free = reinterpret_cast<decltype(i.free)>(dlsym(h, "free_mb_mgr"));
        i.error = reinterpret_cast<decltype(i.error)>(dlsym(h, "imb_get_errno"));
        auto version = reinterpret_cast<decltype(&imb_get_version_str)>(dlsym(h, "imb_get_version_str"));
        if (!i.alloc || !i.init || !i.free || !i.error || !version)
            return i;
        IMB_MGR *m = i.alloc(0);
        if (!m)
            return i;
        IMB_ARCH arch = IMB_ARCH_NONE;
        i.init(m, &arch);
        constexpr uint64_t need = IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
        i.vaes_avx512 = arch == IMB_ARCH_AVX512 && (m->features & need) == need && i.error(m) == 0;
        i.free(m);
        i.name = std::string("intel-ipsec-mb ") + version() + " (VAES, AVX-512)";
        return i; // the library stays loaded for the process's life
    }();
    return i;
}

// One manager per thread (a manager is not thread safe), with the last
// key's schedule, kept while the same key comes back (a table's strobes).
struct ImbThread {
    IMB_MGR *mgr = nullptr;
    alignas(64) gcm_key_data keys; // the header aligns it only where LINUX is defined
    unsigned char key[kMcastKey];
    bool keyed = false;
    ImbThread()
    {
        if ((mgr = imb().alloc(0)))
            imb().init(mgr, nullptr);
    }
    ~ImbThread()
    {
        if (mgr)
            imb().free(mgr);
    }
};

bool gcm(bool enc, const unsigned char *key, const unsigned char iv[12], std::string_view aad,
         unsigned char *tag, const char *in, char *out, size_t len)
{
    static thread_local ImbThread t;
    if (!t.mgr)
        return false;
    if (!t.keyed || std::memcmp(t.key, key, kMcastKey) != 0) {
        IMB_AES128_GCM_PRE(t.mgr, key, &t.keys);
        std::memcpy(t.key, key, kMcastKey);
        t.keyed = true;
    }
    alignas(64) gcm_context_data ctx;
    unsigned char got[kMcastTag];
    auto *dst = reinterpret_cast<uint8_t *>(out);
    auto *src = reinterpret_cast<const uint8_t *>(in);
    auto *a = reinterpret_cast<const uint8_t *>(aad.data());
    if (enc)
        IMB_AES128_GCM_ENC(t.mgr, &t.keys, &ctx, dst, src, len, iv, a, aad.size(), got, kMcastTag);
    else
        IMB_AES128_GCM_DEC(t.mgr, &t.keys, &ctx, dst, src, len, iv, a, aad.size(), got, kMcastTag);
    if (imb().error(t.mgr) != 0)
        return false;
    if (enc) {
        std::memcpy(tag, got, kMcastTag);
        return true;
    }
    unsigned char diff = 0; // in constant time, as OpenSSL compares tags
    for (size_t i = 0; i < kMcastTag; ++i)
        diff |= static_cast<unsigned char>(got[i] ^ tag[i]);
    return diff == 0;
}

// Whether the library loads and has its VAES code here.
bool usable() { return imb().vaes_avx512; }

// Chosen only where usable; the sealing then fails only if a thread
// cannot have a manager of its own (out of memory), which gcm reports.
std::string error()
{
    return usable() ? std::string() : "libIPSec_MB.so.1 does not load, or has no VAES code for this CPU";
}

std::string describe() { return imb().name; }

} // namespace

extern const CipherBackend kIpsecMbBackend = {Cipher::ipsec_mb, usable, error, describe, gcm};

} // namespace storm::net

#endif // STORM_WITH_IPSEC_MB
