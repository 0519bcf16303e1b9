// The client side of a broadcast: what storm-bcast and srun (cli_filter/storm)
// run as the user.
//
// It describes the source (a file, or a directory and everything under
// it), connects to the agent heading the job's nodes (munge: the agent
// learns the user's uid; the client checks the agent runs as a Slurm
// daemon), sends the open request, then streams the files in chunks, each
// read while earlier ones are on the wire, with at most a window of chunks
// unanswered (send_window.hpp), and finally asks for the commit.  Every
// node then holds the complete files under their final names, or none
// does.
//
// Contract: broadcast() returns once the files are in place everywhere and
// throws BcastError with a message for the user (which node, what cause)
// otherwise.  Sources are checked before anything is sent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <netinet/in.h>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "launch_bcast/protocol.hpp"
#include "lib/net/authenticator.hpp"
#include "lib/net/mcast.hpp"

namespace storm::bcast {

class BcastError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A file as it was listed: the reader checks that it opens that file, and
// that it is still the same when its last byte has been read.
struct FileStamp {
    bool known = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    timespec mtime{};
    static FileStamp of(const struct stat &st)
    {
        return {true, st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    }
    // Whether ST, a later stat of the file, has another size or another
    // modification time (to the nanosecond) than listed.  The device and
    // inode are not compared: whether it is the same file is the caller's
    // own check.
    bool content_differs(const struct stat &st) const
    {
        return st.st_size != size || st.st_mtim.tv_sec != mtime.tv_sec || st.st_mtim.tv_nsec != mtime.tv_nsec;
    }
};

// What to send: the entries of the open request and where each file is read.
struct Source {
    std::vector<Entry> entries;
    std::vector<std::string> paths; // by entry; "" but for files
    // By entry, as listed.  A file whose stamp is known fails the broadcast,
    // naming it, if what the reader opens is another file or another size
    // or modification time ("changed after it was listed"), and if the
    // file's size or modification time differs once its bytes have been
    // read ("changed while being sent"): a copy is then not the file, and
    // nothing is committed.  A change that keeps the size and falls within
    // the file system's timestamp granularity goes unseen.
    std::vector<FileStamp> stamps;
    uint64_t total_bytes() const { return bcast::total_bytes(entries); }
    // Appends a file's entry, where it is read and its stamp.
    void add_file(Entry e, std::string path, const struct stat &st);
    // Appends an entry with no bytes (a directory or a link).
    void add_other(Entry e);
};

// A file, or a directory with its whole tree, as it is: symbolic links
// inside as links (their targets as written), files linked several times
// inside as hard links to the first, empty directories kept.  SOURCE
// itself may be a link (followed).  Throws BcastError for a missing or
// unreadable source, and for a tree holding devices, FIFOs or sockets
// (naming them).
Source scan(const std::string &path);
// (A program's shared libraries, gathered into one directory:
// libraries.hpp.)

struct ClientOptions {
    sockaddr_in agent{}; // the agent heading the job's nodes
    uint32_t agent_index = 0;
    std::string agent_name = "the head node"; // for messages
    std::string cred;                         // Slurm's sbcast credential, packed
    std::string dest;                         // absolute
    uint32_t flags = 0;                       // Flags
    uint32_t chunk_size = 0;                  // 0: chunk_size_of() chooses
    bool multicast = false;                   // the agents multicast the data (shim::aim sets it)
    uint32_t nodes = 0;                       // how many (shim::aim sets it; 0: not known)
    unsigned window = 0;                      // chunks in flight at first and at most (send_window.hpp); 0: from 1 MiB worth to 16 MiB
    uint8_t fanout = 1;                       // of the data tree
    std::chrono::milliseconds timeout{10000}; // per hop, and the longest silence of the agent
    Codec compress = Codec::none;             // compress each chunk where it shrinks
    std::function<void(uint64_t done, uint64_t total)> progress;
    // Called as the broadcast passes each phase: "opened" (every node
    // staged the destination), "sent" (every chunk confirmed by every
    // node), "committed" (in place everywhere).
    std::function<void(const char *phase)> phase;
};

// Sends `src` (Broadcast's open() and finish() below); returns the bytes
// of the chunk frames it sent, which with -C is what compression left.
uint64_t broadcast(net::Authenticator &auth, const ClientOptions &o, const Source &src);

// The same broadcast in two steps, for a caller that does other work while
// the bytes travel (srun launches the step's tasks meanwhile, and each
// node's slurmstepd holds them until the broadcast ended there: gate.hpp).
//
// Contract:
//  - The constructor checks the options, connects to the head agent and
//    sends the open request; reading the source starts at once, and so
//    does sending it whenever open() or finish() runs (the head holds the
//    chunks that come before every node opened, and drops them if one
//    could not).
//  - open() returns the session id the agents know the broadcast by, once
//    every node opened the destination (the credential, the destination,
//    room on the disk: the checks of the open request passed everywhere);
//    it throws BcastError otherwise.  It may be called again: it then
//    returns at once.
//  - finish() streams the files and commits; it returns once they are in
//    place on every node and throws BcastError otherwise (an open that
//    fails, if open() was not called, as open() would).
//  - One thread at a time: open() and finish() may run on different
//    threads, one after the other.  The authenticator must outlive open().
//  - cancel() may be called from any thread, and from a signal handler:
//    finish() (or open()) then throws BcastError("cancelled") at once, and
//    the head aborts the broadcast on every node.  After finish()
//    returned it changes nothing.
//  - Destroying it before finish() returned closes the connection: the
//    head aborts the broadcast on every node.
class Broadcast {
public:
    Broadcast(net::Authenticator &auth, ClientOptions o, Source src);
    ~Broadcast();
    Broadcast(const Broadcast &) = delete;
    Broadcast &operator=(const Broadcast &) = delete;

    uint64_t open();
    void finish();
    // The bytes of the chunk frames sent so far (headers included).
    uint64_t wire_bytes() const;
    void cancel() noexcept;

private:
    struct State;
    std::unique_ptr<State> run_;
};

// The chunk size a broadcast uses: o.chunk_size if set, else 32 KiB for a
// pipeline through the nodes (short to fill), 256 KiB there with -C (short
// on the wire where the bytes shrink 3x or more); where the agents
// multicast, net::kMcastChunkSize, or half of it to at most
// kSmallChunkNodes nodes.
//
// A node forwards and writes a chunk only once all of it came, so smaller
// chunks overlap the links better, and each chunk costs every node some
// work.  On the 2-core machine the project is tested on, the nodes' work
// adds up: 12 MB to 64 virtual nodes took 1.10-1.12 s in half chunks and
// 1.17-1.25 s in whole ones over links of 100 Mbit/s, 0.34-0.38 s against
// 0.32-0.35 s unshaped; to 256 nodes, half chunks were slower either way
// (1.62-1.87 s against 1.50-1.82 s shaped, 1.64-1.86 s against 1.35-1.44 s
// unshaped).  128 nodes were not measured.  With -C zstd, Python 3.11's
// standard library (52 MB, 17 MB compressed) to 32 nodes through the
// pipeline took 4.5 s in chunks of 32 KiB, 2.6 s in 128 KiB, 2.5 s in
// 256 KiB and 4.6 s in 1 MiB over links of 100 Mbit/s (plain, 32 KiB:
// 5.7 s); unshaped 3.5, 1.9, 1.8 and 1.6 s: each chunk costs every node
// the same work whatever its size, and compressed ones fill the pipeline
// sooner.  To 64 nodes, shaped: 4.6-5.2 s in 128 KiB, 4.3-4.4 s in 256 KiB,
// 5.3-5.4 s in 512 KiB.  Bytes that do not shrink pay for the longer fill:
// plain chunks of 256 KiB took 6.3 s to 32 nodes shaped (1.8 s unshaped).
constexpr uint32_t kSmallChunkNodes = 64;
inline uint32_t chunk_size_of(const ClientOptions &o)
{
    if (o.chunk_size)
        return o.chunk_size;
    if (!o.multicast)
        return o.compress != Codec::none ? 256u << 10 : 32u << 10;
    return o.nodes && o.nodes <= kSmallChunkNodes ? net::kMcastChunkSize / 2 : net::kMcastChunkSize;
}

} // namespace storm::bcast
