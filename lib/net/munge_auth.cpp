#include "lib/net/munge_auth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include <munge.h>

namespace storm::net {
namespace {

using CtxPtr = std::unique_ptr<struct munge_ctx, decltype(&munge_ctx_destroy)>;

CtxPtr make_ctx(const std::string &socket)
{
    CtxPtr ctx(munge_ctx_create(), munge_ctx_destroy);
    if (!ctx)
        throw AuthError("munge: cannot create a context (out of memory)");
    if (!socket.empty() && munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket.c_str()) != EMUNGE_SUCCESS)
        throw AuthError("munge: cannot use socket " + socket + ": " + munge_ctx_strerror(ctx.get()));
    return ctx;
}

std::string describe(munge_err_t e, munge_ctx_t ctx)
{
    const char *detail = ctx ? munge_ctx_strerror(ctx) : nullptr;
    return std::string(detail ? detail : munge_strerror(e));
}

// Calls f() (a munge call on ctx) until it returns anything but
// EMUNGE_SOCKET (munged's socket busy, or its answer timed out): on a loop
// 8 times at most, sleeping 10 ms, then twice as long each time up to
// 100 ms (450 ms in all); on a worker until the patience's budget passed
// (5 s, or what its caller gave), the pauses growing to 250 ms.
// `attempts` says how many calls were made, `waited` for how long.
template <typename F>
munge_err_t with_retries(F f, const Patience &patience, int &attempts, std::chrono::milliseconds &waited)
{
    using namespace std::chrono;
    const bool loop = patience.on_loop;
    const milliseconds cap(loop ? 100 : 250), budget(patience.budget);
    const auto start = steady_clock::now();
    milliseconds pause(10);
    munge_err_t e = EMUNGE_SOCKET;
    for (attempts = 1;; ++attempts) {
        e = f();
        waited = duration_cast<milliseconds>(steady_clock::now() - start);
        if (e != EMUNGE_SOCKET || (loop ? attempts == 8 : waited >= budget))
            return e;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, cap);
    }
}

std::string failure(const char *what, munge_err_t e, munge_ctx_t ctx, int attempts, std::chrono::milliseconds waited)
{
    std::string out = std::string("munge ") + what + " failed: " + describe(e, ctx);
    if (e == EMUNGE_SOCKET && attempts > 1) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.2f", waited.count() / 1000.0);
        out += " (munged's socket refused all " + std::to_string(attempts) + " attempts in " + secs +
               " s: its connection backlog is full, or it is not running)";
    }
    return out;
}

} // namespace

std::string MungeAuth::socket_from_authinfo(const char *authinfo)
{
    if (!authinfo)
        return "";
    std::string s(authinfo);
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t comma = s.find(',', pos);
        std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (item.compare(0, 7, "socket=") == 0)
            return item.substr(7);
        if (comma == std::string::npos)
            break;
        pos = comma + 1;
    }
    return "";
}

std::string MungeAuth::encode(std::string_view payload) const
{
    CtxPtr ctx = make_ctx(socket_);
    char *cred = nullptr;
    int attempts = 0;
    std::chrono::milliseconds waited{0};
    munge_err_t e = with_retries(
        [&] { return munge_encode(&cred, ctx.get(), payload.data(), static_cast<int>(payload.size())); },
        Patience::loop, attempts, waited);
    if (e != EMUNGE_SUCCESS)
        throw AuthError(failure("encode", e, ctx.get(), attempts, waited));
    std::string out(cred);
    std::free(cred);
    return out;
}

MungeAuth::Credential MungeAuth::decode(std::string_view cred) const { return decode(cred, false, Patience::loop); }

MungeAuth::Credential MungeAuth::decode_allow_replay(std::string_view cred, const Patience &patience) const
{
    return decode(cred, true, patience);
}

MungeAuth::Credential MungeAuth::decode(std::string_view cred, bool replay_ok, const Patience &patience) const
{
    CtxPtr ctx = make_ctx(socket_);
    std::string text(cred); // munge wants a NUL-terminated string
    if (text.find('\0') != std::string::npos)
        throw AuthError("munge decode failed: credential contains a NUL byte");
    void *buf = nullptr;
    int len = 0;
    uid_t uid;
    gid_t gid;
    int attempts = 0;
    std::chrono::milliseconds waited{0};
    munge_err_t e = with_retries([&] { return munge_decode(text.c_str(), ctx.get(), &buf, &len, &uid, &gid); },
                                 patience, attempts, waited);
    std::unique_ptr<void, decltype(&std::free)> hold(buf, std::free);
    if (e != EMUNGE_SUCCESS && !(replay_ok && e == EMUNGE_CRED_REPLAYED))
        throw AuthError(failure("decode", e, ctx.get(), attempts, waited));
    Credential c{uid, gid, std::string(static_cast<const char *>(buf), len > 0 ? len : 0)};
    return c;
}

} // namespace storm::net
