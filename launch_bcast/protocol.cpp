#include "launch_bcast/protocol.hpp"

#include "lib/prim/checksum.hpp"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace storm::bcast {

using net::DecodeError;

namespace {

constexpr uint32_t kMaxEntries = 1u << 20;
constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxCred = 64u << 10;

} // namespace

bool safe_relative_path(std::string_view rel)
{
    if (rel.empty() || rel.front() == '/' || rel.back() == '/')
        return false;
    size_t start = 0;
    while (start <= rel.size()) {
        size_t end = rel.find('/', start);
        if (end == std::string_view::npos)
            end = rel.size();
        std::string_view part = rel.substr(start, end - start);
        if (part.empty() || part == "." || part == ".." || part.find('\0') != std::string_view::npos)
            return false;
        start = end + 1;
    }
    return true;
}

uint32_t crc32(std::string_view data) { return prim::crc32c(data); }

std::string session_hex(uint64_t sid)
{
    char b[17];
    std::snprintf(b, sizeof b, "%016" PRIx64, sid);
    return b;
}

std::string OpenRequest::encode() const
{
    net::Writer w;
    w.u32(kOpenVersion);
    w.bytes(cred);
    w.bytes(dest);
    w.u32(flags);
    w.u8(fanout);
    w.u32(timeout_ms);
    w.u32(static_cast<uint32_t>(entries.size()));
    for (const auto &e : entries) {
        w.bytes(e.path);
        w.u8(e.kind);
        w.u32(e.mode);
        w.u64(e.size);
        w.u64(static_cast<uint64_t>(e.atime));
        w.u64(static_cast<uint64_t>(e.mtime));
        if (e.kind == Entry::symlink)
            w.bytes(e.target);
        else if (e.kind == Entry::hardlink)
            w.u32(e.link);
    }
    return w.take();
}

OpenRequest OpenRequest::decode(std::string_view payload)
{
    net::Reader r(payload);
    uint32_t version = r.u32();
    if (version != kOpenVersion)
        throw DecodeError("a broadcast request of another version (storm-bcast and the agents must be of "
                          "the same release)");
    OpenRequest q;
    q.cred = std::string(r.bytes(kMaxCred));
    q.dest = std::string(r.bytes(kMaxPath));
    q.flags = r.u32();
    q.fanout = r.u8();
    q.timeout_ms = r.u32();
    uint32_t n = r.u32();
    if (n == 0 || n > kMaxEntries)
        throw DecodeError("a broadcast of " + std::to_string(n) + " entries");
    q.entries.reserve(std::min<uint32_t>(n, 4096));
    for (uint32_t i = 0; i < n; ++i) {
        Entry e;
        e.path = std::string(r.bytes(kMaxPath));
        uint8_t kind = r.u8();
        if (kind > Entry::hardlink)
            throw DecodeError("entry \"" + e.path + "\" of unknown kind " + std::to_string(kind));
        e.kind = static_cast<Entry::Kind>(kind);
        e.mode = r.u32();
        e.size = r.u64();
        e.atime = static_cast<int64_t>(r.u64());
        e.mtime = static_cast<int64_t>(r.u64());
        if (e.kind == Entry::symlink)
            e.target = std::string(r.bytes(kMaxPath));
        else if (e.kind == Entry::hardlink)
            e.link = r.u32();
        if (i == 0 ? !e.path.empty() : !safe_relative_path(e.path))
            throw DecodeError("entry path \"" + e.path + "\" is not allowed");
        if (e.mode > 07777 || (e.kind != Entry::file && e.size != 0))
            throw DecodeError("entry \"" + e.path + "\" has a bad mode or size");
        if (i == 0 && e.kind != Entry::file && e.kind != Entry::directory)
            throw DecodeError("a broadcast of a link");
        if (e.kind == Entry::symlink &&
            (e.target.empty() || e.target.size() >= kMaxPath || e.target.find('\0') != std::string::npos))
            throw DecodeError("symbolic link \"" + e.path + "\" has a bad target");
        if (e.kind == Entry::hardlink &&
            (e.link == 0 || e.link >= i || q.entries[e.link].kind != Entry::file))
            throw DecodeError("hard link \"" + e.path + "\" does not name an earlier file");
        q.entries.push_back(std::move(e));
    }
    r.finish();
    if (q.cred.empty())
        throw DecodeError("no credential");
    if (q.dest.size() < 2 || q.dest.front() != '/' || q.dest.find('\0') != std::string::npos)
        throw DecodeError("destination \"" + q.dest + "\" is not an absolute path");
    if (q.dest.back() == '/' && q.entries.front().dir())
        throw DecodeError("a directory needs a destination name, not \"" + q.dest + "\"");
    if (!q.entries.front().dir() && n != 1)
        throw DecodeError("a file broadcast with more than one entry");
    if (q.fanout < 1 || q.fanout > 64 || q.timeout_ms < 1 || q.timeout_ms > 3600000)
        throw DecodeError("fanout or timeout out of range");
    if (q.flags & ~static_cast<uint32_t>(kForce | kPreserve))
        throw DecodeError("unknown flags");
    return q;
}

uint64_t total_bytes(const std::vector<Entry> &entries)
{
    uint64_t t = 0;
    for (const auto &e : entries)
        t += e.size;
    return t;
}

void ChunkHeader::encode(net::Writer &w) const
{
    w.u32(entry);
    w.u64(offset);
    w.u32(raw_len);
    w.u32(crc);
    w.u8((codec == Codec::zlib ? 1 : 0) | (packed ? 2 : 0) | (codec == Codec::zstd ? 4 : 0) |
         (codec == Codec::lz4 ? 8 : 0));
}

ChunkHeader ChunkHeader::decode(net::Reader &r)
{
    ChunkHeader h;
    h.entry = r.u32();
    h.offset = r.u64();
    h.raw_len = r.u32();
    h.crc = r.u32();
    uint8_t c = r.u8();
    unsigned codecs = (c & 1) + ((c >> 2) & 1) + ((c >> 3) & 1);
    if (c > 15 || codecs > 1 || h.raw_len == 0 || h.raw_len > kMaxChunk)
        throw DecodeError("bad chunk header");
    h.codec = (c & 1) ? Codec::zlib : (c & 4) ? Codec::zstd : (c & 8) ? Codec::lz4 : Codec::none;
    h.packed = c & 2;
    if (h.packed && (h.entry != 0 || h.offset != 0))
        throw DecodeError("bad chunk header");
    return h;
}

void encode_record_header(std::string &out, uint32_t entry, uint64_t offset, uint32_t len)
{
    net::Writer w;
    w.u32(entry);
    w.u64(offset);
    w.u32(len);
    out += w.data();
}

std::vector<PackRecord> decode_pack(std::string_view bytes)
{
    std::vector<PackRecord> out;
    net::Reader r(bytes);
    while (r.remaining() > 0) {
        if (r.remaining() < PackRecord::kHeader)
            throw DecodeError("packed chunk: a record header cut short after " + std::to_string(out.size()) +
                              " records");
        PackRecord rec;
        rec.entry = r.u32();
        rec.offset = r.u64();
        uint32_t len = r.u32();
        if (len == 0 || len > r.remaining())
            throw DecodeError("packed chunk: record " + std::to_string(out.size()) + " (entry " +
                              std::to_string(rec.entry) + ") of " + std::to_string(len) + " bytes, " +
                              std::to_string(r.remaining()) + " left in the chunk");
        if (!out.empty() && rec.entry <= out.back().entry)
            throw DecodeError("packed chunk: record " + std::to_string(out.size()) + " names entry " +
                              std::to_string(rec.entry) + " after entry " + std::to_string(out.back().entry));
        rec.bytes = r.raw(len);
        out.push_back(rec);
    }
    return out;
}

std::string check_record(const PackRecord &r, bool is_file, uint64_t size, uint64_t received)
{
    if (!is_file)
        return "packed chunk: a record for entry " + std::to_string(r.entry) + ", which is not a file";
    if (r.offset != received || r.bytes.size() > size - received)
        return "packed chunk: record [" + std::to_string(r.offset) + ", +" + std::to_string(r.bytes.size()) +
               ") of entry " + std::to_string(r.entry) + " out of order or beyond its " +
               std::to_string(size) + " bytes (" + std::to_string(received) + " received)";
    return "";
}

PackPlan::PackPlan(const std::vector<Entry> &entries, uint32_t chunk) : entries_(entries), chunk_(chunk)
{
    if (chunk <= PackRecord::kHeader)
        throw std::invalid_argument("packed chunks of " + std::to_string(chunk) + " bytes");
}

std::vector<PackPiece> PackPlan::next()
{
    std::vector<PackPiece> out;
    uint64_t used = 0;
    while (entry_ < entries_.size() && used + PackRecord::kHeader < chunk_) {
        const Entry &e = entries_[entry_];
        if (e.kind != Entry::file || offset_ >= e.size) {
            ++entry_;
            offset_ = 0;
            continue;
        }
        uint64_t len = std::min<uint64_t>(e.size - offset_, chunk_ - used - PackRecord::kHeader);
        out.push_back(PackPiece{static_cast<uint32_t>(entry_), offset_, static_cast<uint32_t>(len)});
        used += PackRecord::kHeader + len;
        offset_ += len;
    }
    return out;
}

std::string Reply::encode() const
{
    net::Writer w;
    w.u8(kind);
    w.u64(value);
    w.bytes(message);
    return w.take();
}

Reply Reply::decode(std::string_view payload)
{
    net::Reader r(payload);
    Reply p;
    uint8_t k = r.u8();
    if (k < opened || k > working)
        throw DecodeError("unknown reply kind " + std::to_string(k));
    p.kind = static_cast<Kind>(k);
    p.value = r.u64();
    p.message = std::string(r.bytes(60000));
    r.finish();
    return p;
}

} // namespace storm::bcast
