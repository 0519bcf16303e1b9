#include "launch_bcast/codec.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <strings.h>

#include <lz4.h>
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
    if (named(name, "lz4"))
        return Codec::lz4;
    if (named(name, "zstd"))
        return Codec::zstd;
    if (named(name, "zlib"))
        return Codec::zlib;
    if (named(name, "none"))
        return Codec::none;
    throw std::invalid_argument("unknown compression \"" + std::string(name) +
                                "\" (lz4, zstd, zlib or none)");
}

const char *codec_name(Codec c)
{
    switch (c) {
    case Codec::zlib:
        return "zlib";
    case Codec::zstd:
        return "zstd";
    case Codec::lz4:
        return "lz4";
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
    if (c == Codec::lz4) {
        if (raw.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE))
            return false;
        out.resize(LZ4_compressBound(static_cast<int>(raw.size())));
        int len = LZ4_compress_default(raw.data(), out.data(), static_cast<int>(raw.size()),
                                       static_cast<int>(out.size()));
        if (len <= 0 || static_cast<size_t>(len) >= raw.size())
            return false;
        out.resize(len);
        return true;
    }
    return false;
}

std::string decompress(Codec c, std::string_view packed, uint32_t raw_len, std::string &out)
{
    out.resize(raw_len); // fills only what `out` grows by: a caller may keep it
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
    if (c == Codec::lz4) {
        // LZ4_decompress_safe writes within `out`'s capacity and reads
        // within `packed`, whatever the block holds.
        if (packed.size() > static_cast<size_t>(INT32_MAX) || raw_len > static_cast<uint32_t>(INT32_MAX))
            return "does not decompress (lz4)";
        int len = LZ4_decompress_safe(packed.data(), out.data(), static_cast<int>(packed.size()),
                                      static_cast<int>(raw_len));
        if (len < 0 || static_cast<uint32_t>(len) != raw_len)
            return "does not decompress (lz4)";
        return "";
    }
    return "is not compressed";
}

} // namespace storm::bcast
