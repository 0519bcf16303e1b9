#include "launch_bcast/codec.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <strings.h>

#include <zlib.h>
#include <zstd.h>

namespace storm::bcast {

namespace {

constexpr int kZstdLevel = 1;
constexpr int kZlibLevel = 1;

struct CCtxFree {
    void operator()(ZSTD_CCtx *c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
    void operator()(ZSTD_DCtx *c) const { ZSTD_freeDCtx(c); }
};

ZSTD_CCtx *cctx()
{
    thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> c(ZSTD_createCCtx());
    return c.get();
}

ZSTD_DCtx *dctx()
{
    thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> d(ZSTD_createDCtx());
    return d.get();
}

bool named(std::string_view name, const char *what)
{
    return name.size() == strlen(what) && strncasecmp(name.data(), what, name.size()) == 0;
}

} // namespace

Codec codec_named(std::string_view name)
{
    if (named(name, "zstd") || named(name, "lz4"))
        return Codec::zstd;
    if (named(name, "zlib"))
        return Codec::zlib;
    if (named(name, "none"))
        return Codec::none;
    throw std::invalid_argument("unknown compression \"" + std::string(name) +
                                "\" (zstd, zlib, lz4 or none)");
}

const char *codec_name(Codec c)
{
    switch (c) {
    case Codec::zlib:
        return "zlib";
    case Codec::zstd:
        return "zstd";
    case Codec::none:
        break;
    }
    return "none";
}

bool compress(Codec c, std::string_view raw, std::string &out)
{
    if (c == Codec::zlib) {
        uLongf len = compressBound(raw.size());
        out.resize(len);
        if (compress2(reinterpret_cast<Bytef *>(out.data()), &len,
                      reinterpret_cast<const Bytef *>(raw.data()), raw.size(), kZlibLevel) != Z_OK ||
            len >= raw.size())
            return false;
        out.resize(len);
        return true;
    }
    if (c == Codec::zstd) {
        ZSTD_CCtx *ctx = cctx();
        if (!ctx)
            return false;
        out.resize(ZSTD_compressBound(raw.size()));
        size_t len = ZSTD_compressCCtx(ctx, out.data(), out.size(), raw.data(), raw.size(), kZstdLevel);
        if (ZSTD_isError(len) || len >= raw.size())
            return false;
        out.resize(len);
        return true;
    }
    return false;
}

std::string decompress(Codec c, std::string_view packed, uint32_t raw_len, std::string &out)
{
    out.resize(raw_len);
    if (c == Codec::zlib) {
        uLongf len = raw_len;
        if (uncompress(reinterpret_cast<Bytef *>(out.data()), &len,
                       reinterpret_cast<const Bytef *>(packed.data()), packed.size()) != Z_OK ||
            len != raw_len)
            return "does not decompress (zlib)";
        return "";
    }
    if (c == Codec::zstd) {
        ZSTD_DCtx *ctx = dctx();
        if (!ctx)
            return "cannot decompress: out of memory for zstd";
        // One shot into `out`: zstd writes within its capacity and keeps
        // no window of its own, whatever the frame declares.
        size_t len = ZSTD_decompressDCtx(ctx, out.data(), out.size(), packed.data(), packed.size());
        if (ZSTD_isError(len) || len != raw_len)
            return "does not decompress (zstd)";
        return "";
    }
    return "is not compressed";
}

} // namespace storm::bcast
