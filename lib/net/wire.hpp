// Bounds-checked encoding of Storm's messages (network byte order).
//
// Contract: Writer appends to a std::string it owns.  Reader reads from a
// buffer it does not own (the caller keeps it alive) and throws DecodeError
// on any read past the end, so a malformed or truncated message can never
// make a receiver read outside the bytes it was given.  Reader::finish()
// rejects trailing bytes.
#pragma once

#include <cstdint>
#include <endian.h>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace storm::net {

class DecodeError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Writer {
public:
    void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
    void u16(uint16_t v) { put(htobe16(v)); }
    void u32(uint32_t v) { put(htobe32(v)); }
    void u64(uint64_t v) { put(htobe64(v)); }
    // A length-prefixed (u32) byte string.
    void bytes(std::string_view b)
    {
        u32(static_cast<uint32_t>(b.size()));
        buf_.append(b.data(), b.size());
    }
    // Exactly n bytes, without a length.
    void raw(const void *p, size_t n) { buf_.append(static_cast<const char *>(p), n); }
    void reserve(size_t n) { buf_.reserve(n); }
    const std::string &data() const noexcept { return buf_; }
    std::string take() noexcept { return std::move(buf_); }

private:
    template <typename T> void put(T big_endian)
    {
        buf_.append(reinterpret_cast<const char *>(&big_endian), sizeof big_endian);
    }
    std::string buf_;
};

class Reader {
public:
    Reader(const void *p, size_t n) : p_(static_cast<const unsigned char *>(p)), n_(n) {}
    explicit Reader(std::string_view s) : Reader(s.data(), s.size()) {}

    uint8_t u8()
    {
        need(1);
        return p_[off_++];
    }
    uint16_t u16() { return be16toh(get<uint16_t>()); }
    uint32_t u32() { return be32toh(get<uint32_t>()); }
    uint64_t u64() { return be64toh(get<uint64_t>()); }
    // A length-prefixed byte string of at most `max` bytes.
    std::string_view bytes(size_t max)
    {
        uint32_t len = u32();
        if (len > max)
            throw DecodeError("field of " + std::to_string(len) + " bytes exceeds its limit of " +
                              std::to_string(max));
        need(len);
        std::string_view v(reinterpret_cast<const char *>(p_ + off_), len);
        off_ += len;
        return v;
    }
    // Exactly n bytes, without a length.
    std::string_view raw(size_t n)
    {
        need(n);
        std::string_view v(reinterpret_cast<const char *>(p_ + off_), n);
        off_ += n;
        return v;
    }
    size_t remaining() const noexcept { return n_ - off_; }
    // Everything not read yet (consumed).
    std::string_view rest()
    {
        std::string_view v(reinterpret_cast<const char *>(p_ + off_), n_ - off_);
        off_ = n_;
        return v;
    }
    void finish() const
    {
        if (off_ != n_)
            throw DecodeError(std::to_string(n_ - off_) + " unexpected trailing bytes");
    }

private:
    void need(size_t k) const
    {
        if (k > n_ - off_)
            throw DecodeError("truncated: need " + std::to_string(k) + " more bytes, have " +
                              std::to_string(n_ - off_));
    }
    // The next sizeof(T) bytes as they are (big-endian on the wire).
    template <typename T> T get()
    {
        need(sizeof(T));
        T v;
        std::memcpy(&v, p_ + off_, sizeof v);
        off_ += sizeof v;
        return v;
    }
    const unsigned char *p_;
    size_t n_;
    size_t off_ = 0;
};

} // namespace storm::net
