// How a chunk's bytes are compressed on the wire (`storm-bcast -C`).
//
// Three codecs, on Python 3.11's standard library as one tar of 53.4 MB,
// each 256 KiB chunk on its own, one thread of a 2-core machine (each
// library's one-shot calls, as here):
//
//   codec        on the wire   compress        inflate
//   lz4          2.3x smaller  380-440 MB/s    2.0-2.4 GB/s
//   zstd -1      3.2x smaller  215-220 MB/s    0.8-1.1 GB/s
//   zlib -1      3.0x smaller  77 MB/s         0.3 GB/s
//
// (two runs; lz4 at a higher level, LZ4_compress_HC at 2, sends 19.2 MB,
// compressing at 85 MB/s.)
//
// Every node inflates every byte and only the sender compresses, so the
// nodes' CPUs pay for inflating N copies: lz4 is the default (sbcast's
// too).  zstd sends 28% fewer bytes, for links slower than a node inflates.
//
// Contract: compress() and decompress() are safe on any thread (each keeps
// its library context per thread); decompress() never writes more than
// `raw_len` bytes, whatever a hostile frame declares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace storm::bcast {

enum class Codec : uint8_t { none, zlib, zstd, lz4 };

// What `-C` without a name, and `srun --bcast --compress`, choose.
constexpr Codec kDefaultCodec = Codec::lz4;

// The codec of a name as `-C` and sbcast take it: "lz4", "zstd", "zlib" or
// "none", in any case.  Throws std::invalid_argument naming the choices for
// any other.
Codec codec_named(std::string_view name);
const char *codec_name(Codec c);

// `raw` compressed into `out`; false (out unspecified) where that would not
// be smaller, or with Codec::none.
bool compress(Codec c, std::string_view raw, std::string &out);

// `packed` inflated into `out`, which must come to exactly `raw_len` bytes;
// "" or why not.
std::string decompress(Codec c, std::string_view packed, uint32_t raw_len, std::string &out);

} // namespace storm::bcast
