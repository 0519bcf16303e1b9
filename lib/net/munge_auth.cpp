#include "lib/net/munge_auth.hpp"

#include <cstdlib>
#include <memory>

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
    munge_err_t e = munge_encode(&cred, ctx.get(), payload.data(), static_cast<int>(payload.size()));
    if (e != EMUNGE_SUCCESS)
        throw AuthError("munge encode failed: " + describe(e, ctx.get()));
    std::string out(cred);
    std::free(cred);
    return out;
}

MungeAuth::Credential MungeAuth::decode(std::string_view cred) const { return decode(cred, false); }

MungeAuth::Credential MungeAuth::decode_allow_replay(std::string_view cred) const
{
    return decode(cred, true);
}

MungeAuth::Credential MungeAuth::decode(std::string_view cred, bool replay_ok) const
{
    CtxPtr ctx = make_ctx(socket_);
    std::string text(cred); // munge wants a NUL-terminated string
    if (text.find('\0') != std::string::npos)
        throw AuthError("munge decode failed: credential contains a NUL byte");
    void *buf = nullptr;
    int len = 0;
    uid_t uid;
    gid_t gid;
    munge_err_t e = munge_decode(text.c_str(), ctx.get(), &buf, &len, &uid, &gid);
    std::unique_ptr<void, decltype(&std::free)> hold(buf, std::free);
    if (e != EMUNGE_SUCCESS && !(replay_ok && e == EMUNGE_CRED_REPLAYED))
        throw AuthError("munge decode failed: " + describe(e, ctx.get()));
    Credential c{uid, gid, std::string(static_cast<const char *>(buf), len > 0 ? len : 0)};
    return c;
}

} // namespace storm::net
