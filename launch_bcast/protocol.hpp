// The broadcast protocol: what a user's client asks of the agent that
// heads a transfer (the service frames kOpenFrame ... kReplyFrame below),
// and what that agent sends down the tree to every node of the job
// (XFER-AND-SIGNAL events "bcast:...").
//
//   client -> head agent   open    OpenRequest
//   head -> every node     event "bcast:open:<sid>"   the same OpenRequest
//   head -> client         reply   Reply{opened, sid}
//   client -> head         data    Chunk (header + bytes), any number,
//                                  at most `window` unanswered
//   head -> every node     event "bcast:data:<sid>"   the same bytes
//   head -> client         reply   Reply{done, sequence}
//   client -> head         close   (empty)
//   head -> every node     COMPARE-AND-WRITE "bcast:<sid>:complete" == 1
//                          then event "bcast:commit:<sid>"
//   head -> client         reply   Reply{committed}
//   on any failure         event "bcast:abort:<sid>"; Reply{failed, why}
//
// Contract: every decode throws net::DecodeError on a malformed message and
// checks what a receiver relies on (path shapes, sizes, counts).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "launch_bcast/codec.hpp"
#include "lib/net/frame.hpp"
#include "lib/net/wire.hpp"

namespace storm::bcast {

// The frames between a user's client and the head agent: service frames
// (lib/net/frame.hpp), which the head's engine hands to the Service.  open
// and data carry up to net::kMaxDataPayload bytes, close and reply up to
// net::kMaxControlPayload.
constexpr net::MsgType kOpenFrame = net::service_data(0);     // client -> head: OpenRequest
constexpr net::MsgType kDataFrame = net::service_data(1);     // client -> head: one chunk of a file
constexpr net::MsgType kCloseFrame = net::service_control(0); // client -> head: every chunk sent, commit
constexpr net::MsgType kReplyFrame = net::service_control(1); // head -> client: Reply

enum Flags : uint32_t {
    kForce = 1,    // replace an existing destination
    kPreserve = 2, // keep the source's access and modification times
};

// One entry of a broadcast.  The first entry is the destination itself
// (path "", a file or a directory); a directory's contents follow it, with
// paths relative to it ("a", "a/b"), each directory before what it holds.
// Symbolic links keep their targets exactly as written (relative,
// absolute, dangling, pointing outside: a node never follows one); a hard
// link names an earlier file entry of the same broadcast.  Other kinds of
// files (devices, FIFOs, sockets) are never sent.
struct Entry {
    enum Kind : uint8_t { file = 0, directory = 1, symlink = 2, hardlink = 3 };
    std::string path;
    Kind kind = file;
    uint32_t mode = 0; // permission bits (07777); 0 for links
    uint64_t size = 0; // bytes (files; 0 for every other kind)
    int64_t atime = 0, mtime = 0;
    std::string target; // symlink: its target as written
    uint32_t link = 0;  // hardlink: the index of the file entry it links to

    bool dir() const { return kind == directory; }
};

// The bytes of the files among `entries`.
uint64_t total_bytes(const std::vector<Entry> &entries);

// The open request's version, its first 4 bytes: above any credential's
// length, so that an agent or client of the version before (which started
// with the credential) refuses the other's request rather than misread it.
// 0x53420002 ("SB", 2): entries with kinds (symlinks, hard links);
// 0x53420003: packed chunks (a directory's files as records).
constexpr uint32_t kOpenVersion = 0x53420003;

struct OpenRequest {
    std::string cred; // Slurm's sbcast credential, packed
    std::string dest; // absolute; a trailing '/' asks for the per-node name srun --bcast uses
    uint32_t flags = 0;
    uint8_t fanout = 1; // of the data tree (1: a pipeline through the nodes)
    uint32_t timeout_ms = 10000;
    std::vector<Entry> entries;

    std::string encode() const;
    static OpenRequest decode(std::string_view payload);
    uint64_t total_bytes() const { return bcast::total_bytes(entries); }
};

// A chunk: a header and the bytes.  The bytes are compressed with `codec`
// (codec.hpp); crc is the CRC-32C of the uncompressed bytes.  The header's
// flags byte: bit 0 zlib, bit 1 packed, bit 2 zstd, bit 3 lz4 (one codec at
// most).
//
// A chunk of one file (a file broadcast) carries bytes [offset, offset +
// raw_len) of entry `entry`.  A packed chunk (`packed`: every chunk of a
// directory broadcast) carries records, each a piece of one file (see
// PackRecord), its entry and offset 0; raw_len and crc are those of the
// records as a whole.
struct ChunkHeader {
    static constexpr size_t kSize = 4 + 8 + 4 + 4 + 1;
    uint32_t entry = 0;
    uint64_t offset = 0;
    uint32_t raw_len = 0;
    uint32_t crc = 0;
    Codec codec = Codec::none;
    bool packed = false;

    void encode(net::Writer &w) const;
    // Reads the header; the rest of the payload is the bytes.
    static ChunkHeader decode(net::Reader &r);
};

// One record of a packed chunk: bytes [offset, offset + len) of file entry
// `entry`, encoded as entry (4 bytes), offset (8), len (4), then the
// bytes.  The records of a chunk name strictly increasing entries, and
// each has at least one byte: a node checks each continues its file where
// the bytes received so far end (check_record).
struct PackRecord {
    static constexpr size_t kHeader = 4 + 8 + 4;
    uint32_t entry = 0;
    uint64_t offset = 0;
    std::string_view bytes;
};

// Appends a record's header (its `len` bytes follow, the caller's).
void encode_record_header(std::string &out, uint32_t entry, uint64_t offset, uint32_t len);
// The records of a packed chunk's (uncompressed) bytes, which they fill
// exactly.  Throws net::DecodeError for a truncated or empty record, or
// entries not strictly increasing.
std::vector<PackRecord> decode_pack(std::string_view bytes);
// Whether record `r` fits what a node has of its entry: a file
// (`is_file`) of `size` bytes of which `received` came.  "" or why not.
std::string check_record(const PackRecord &r, bool is_file, uint64_t size, uint64_t received);

// How a directory broadcast's files are cut into packed chunks of at most
// `chunk` bytes: in entry order, files with bytes only, each chunk filled
// up to `chunk` (a file that does not fit continues in the next chunk,
// a large one over several).  The client's reader follows it.
struct PackPiece {
    uint32_t entry = 0;
    uint64_t offset = 0;
    uint32_t len = 0;
};
class PackPlan {
public:
    // `chunk` must exceed PackRecord::kHeader.
    PackPlan(const std::vector<Entry> &entries, uint32_t chunk);
    // The pieces of the next chunk; empty once every byte is planned.
    std::vector<PackPiece> next();

private:
    const std::vector<Entry> &entries_;
    uint32_t chunk_;
    size_t entry_ = 0;
    uint64_t offset_ = 0;
};


// Between the head and the nodes (events "bcast:<kind>:<sid>" of the
// engine; receiver.hpp and service.hpp implement them), the timeouts all
// derive from the request's `timeout_ms` (T):
// - A hop waits T per level of the tree below it for its children's
//   answers (lib/prim: 5 levels at 1000 nodes, fanout 8, so the head may
//   wait 5 T on one operation).
// - The open (which stages every entry) and the commit (which sets each
//   entry's mode and times and swaps it into place) take a time that
//   grows with the entries and the node's load, not with the tree: a node
//   answers them once that work ended, or, while it progresses, T/2 after
//   the request came.  The head then compares "bcast:<sid>:ready" on every
//   node with COMPARE-AND-WRITE (kStaged, kPlaced in receiver.hpp); while
//   some node is not ready it sends "wait", which each node answers the
//   same way (at once if ready), and compares again.  A node's work fails
//   if one step (an entry, a lookup, a rename) makes no progress for T:
//   its answer then names the node and the step, within T of the stall.
//   An answer within T/2 of the request implies that no node answered for
//   progress alone: the head skips the comparison.
// - "alive" (unanswered) goes from the head to every node each T while
//   the broadcast lasts, whatever it waits for; a node gives up on a
//   broadcast it heard nothing of for 3 T (30 s at least) with no answer
//   of its own pending, and removes its part.  So no wait of the head,
//   however many levels, outlasts the nodes' patience while the head lives.
// - A retry to a destination whose earlier broadcast is still being
//   removed on a node (a failed one) waits there for that removal, as the
//   staging would (answers for progress meanwhile); it fails, saying to
//   retry, only if that removal's file system stopped answering for T.
//
// The head's answers.  `working` says only that the head is alive and its
// broadcast still going: the head sends it when it has said nothing else
// for the broadcast's hop timeout, for a wait on the nodes may last the
// timeout once per level of the tree (and an abort as long again), which
// is longer than a client's silence deadline of three timeouts from 74
// nodes on at fanout 8.
struct Reply {
    enum Kind : uint8_t { opened = 1, done = 2, committed = 3, failed = 4, working = 5 };
    Kind kind = failed;
    uint64_t value = 0; // opened: the session id; done: the chunk's sequence number; working: chunks answered
    std::string message;

    std::string encode() const;
    static Reply decode(std::string_view payload);
};

// The largest chunk a client may send (uncompressed).
constexpr uint32_t kMaxChunk = 4u << 20;

// A client sends chunks before the nodes opened until it sent this many
// bytes of them (frames), then waits for the open; a head holds at most
// twice as many meanwhile and cuts off a client that sends more.
constexpr uint64_t kEarlyBytes = 16u << 20;

// A head stops reading a client while this many bytes of its chunks are
// forwarded and not yet confirmed by every node (a client keeps 16 MiB in
// flight by default), and reads again once they fell to half: the head's
// memory stays bounded whatever the client sends.
constexpr uint64_t kHeadWindowBytes = 32u << 20;

// Whether `rel` is a relative path without empty, "." or ".." components.
bool safe_relative_path(std::string_view rel);

// CRC-32C (Castagnoli) of data ("123456789" -> 0xe3069283).
uint32_t crc32(std::string_view data);

// A session id as every name and message shows it: 16 hex digits.
std::string session_hex(uint64_t sid);

} // namespace storm::bcast
