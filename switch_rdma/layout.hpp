// The layout of a task's queues in its context's window (shared memory
// between the task and the node agent).
//
// A context's window is a memfd the node agent creates when slurmstepd
// opens the context and hands to each task at attach (SCM_RIGHTS).  It
// holds one TaskShare (pool_config.hpp) per local task, task L's at offset
// L * share.bytes:
//
//   [QueueHeader][send slot 0 .. send_slots-1][recv slot 0 .. recv_slots-1]
//
// each slot packet_size bytes: a PacketHeader then up to
// packet_size - sizeof(PacketHeader) bytes of the message.
//
// Rings: indices count up forever (uint64); slot = index % slots.
//  - send ring: the task's application threads produce (send_tail), its
//    progress thread consumes (send_head) when it injects the packet;
//  - recv ring: the progress thread produces (recv_tail) packets arriving
//    from the network, the application consumes (recv_head).
// The valid packets are send [send_head, send_tail) and recv
// [recv_head, recv_tail); an index pair whose difference exceeds the slot
// count is corrupt: the agent fails the context and copies nothing.
//
// Residency (swapped mode): `resident` is 1 while the context holds the
// node's pool.  At a switch the agent copies the header and the valid
// packets out (plus send slot send_tail, which the application may be
// writing when it was stopped), then releases the window's pages; at the
// next switch in it copies them back and sets resident = 1 (FUTEX_WAKE on
// it).  The application touches the rings only while resident == 1: a
// released page reads as zero.  Divided windows are always resident.
#pragma once

#include <atomic>
#include <cstdint>

namespace storm::rdma {

constexpr uint32_t queue_magic = 0x53544d51; // "STMQ"
constexpr uint32_t queue_version = 1;

struct alignas(64) QueueHeader {
    uint32_t magic;
    uint32_t version;
    uint32_t packet_size;
    uint32_t send_slots;
    uint32_t recv_slots;
    uint32_t credits; // initial credits per sender
    uint32_t rank;    // the task's global rank
    uint32_t ntasks;
    alignas(64) std::atomic<uint32_t> resident; // futex word
    alignas(64) std::atomic<uint64_t> send_tail;
    alignas(64) std::atomic<uint64_t> send_head;
    alignas(64) std::atomic<uint64_t> recv_tail;
    alignas(64) std::atomic<uint64_t> recv_head;
};
static_assert(sizeof(QueueHeader) % 64 == 0, "slots stay cache-line aligned");

struct PacketHeader {
    uint32_t src; // sender's rank
    uint32_t dst; // receiver's rank
    uint32_t tag;
    uint32_t len;     // bytes of message data in this packet
    uint32_t msg_len; // the whole message's length
    uint32_t flags;   // packet_first | packet_last
    uint64_t seq;     // per (src, dst) packet sequence, from 0
};
constexpr uint32_t packet_first = 1;
constexpr uint32_t packet_last = 2;

inline uint8_t *send_slot(QueueHeader *q, uint64_t index)
{
    return reinterpret_cast<uint8_t *>(q) + sizeof(QueueHeader) + (index % q->send_slots) * q->packet_size;
}
inline uint8_t *recv_slot(QueueHeader *q, uint64_t index)
{
    return reinterpret_cast<uint8_t *>(q) + sizeof(QueueHeader) +
           (uint64_t{q->send_slots} + index % q->recv_slots) * q->packet_size;
}
// Bytes a share needs for its header and slots.
inline uint64_t share_bytes_needed(uint32_t packet_size, uint32_t send_slots, uint32_t recv_slots)
{
    return sizeof(QueueHeader) + (uint64_t{send_slots} + recv_slots) * packet_size;
}

} // namespace storm::rdma
