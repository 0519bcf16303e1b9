// How a chunk's bytes are compressed on the wire (`storm-bcast -C`).
//
// zstd at level 1 is the default: on Python's standard library it shrinks
// the bytes about 3.2x at about 400 MB/s, and a node inflates them at
// about 1 GB/s (zlib at level 1: 3.0x, 100 MB/s and 200 MB/s).  So where
// the links bound a broadcast it sends a third of the bytes, and where
// the nodes' CPUs do it costs them less than the bytes it saves.
//
// Contract: compress() and decompress() are safe on any thread (each keeps
// its library context per thread); decompress() never writes more than
// `raw_len` bytes, whatever a hostile frame declares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace storm::bcast {

enum class Codec : uint8_t { none, zlib, zstd };

// The codec of a name as `-C` and sbcast take it: "zstd", "zlib", "none",
// and "lz4" (sbcast's default, accepted for its users: zstd).  Throws
// std::invalid_argument naming the choices for any other.
Codec codec_named(std::string_view name);
const char *codec_name(Codec c);

// `raw` compressed into `out`; false (out unspecified) where that would not
// be smaller, or with Codec::none.
bool compress(Codec c, std::string_view raw, std::string &out);

// `packed` inflated into `out`, which must come to exactly `raw_len` bytes;
// "" or why not.
std::string decompress(Codec c, std::string_view packed, uint32_t raw_len, std::string &out);

} // namespace storm::bcast
