#include "switch_rdma/window.hpp"

#include <cstring>
#include <new>

#include "switch_rdma/layout.hpp"

namespace storm::rdma {

namespace {

constexpr uint32_t store_magic = 0x53544d57; // "STMW"

// What precedes the saved bytes in a store.
struct StoreHeader {
    uint32_t magic;
    uint32_t valid_only;
    uint64_t bytes;
    uint32_t packet_size;
    uint32_t send_slots;
    uint32_t recv_slots;
    uint32_t pad;
    uint64_t send_first, send_count; // saved send ring indices [first, first + count)
    uint64_t recv_first, recv_count;
};

std::string pair_text(const char *ring, uint64_t head, uint64_t tail, uint32_t slots)
{
    return std::string(ring) + " ring head " + std::to_string(head) + " tail " + std::to_string(tail) + " (" +
           std::to_string(slots) + " slots)";
}

} // namespace

void init_share(void *share, uint64_t bytes, uint32_t packet_size, uint32_t send_slots, uint32_t recv_slots,
                uint32_t credits, uint32_t rank, uint32_t ntasks, bool resident)
{
    if (packet_size <= sizeof(PacketHeader) || send_slots == 0 || recv_slots == 0 ||
        share_bytes_needed(packet_size, send_slots, recv_slots) > bytes)
        throw std::invalid_argument("share of " + std::to_string(bytes) + " bytes cannot hold " +
                                    std::to_string(send_slots) + "+" + std::to_string(recv_slots) +
                                    " slots of " + std::to_string(packet_size) + " bytes");
    auto *q = new (share) QueueHeader;
    q->magic = queue_magic;
    q->version = queue_version;
    q->packet_size = packet_size;
    q->send_slots = send_slots;
    q->recv_slots = recv_slots;
    q->credits = credits;
    q->rank = rank;
    q->ntasks = ntasks;
    q->send_tail.store(0, std::memory_order_relaxed);
    q->send_head.store(0, std::memory_order_relaxed);
    q->recv_tail.store(0, std::memory_order_relaxed);
    q->recv_head.store(0, std::memory_order_relaxed);
    q->resident.store(resident ? 1 : 0, std::memory_order_release);
}

size_t save_share(const void *share, uint64_t bytes, uint32_t packet_size, uint32_t send_slots,
                  uint32_t recv_slots, bool valid_only, std::string &store)
{
    const auto *q = static_cast<const QueueHeader *>(share);
    std::string who = "rank " + std::to_string(q->rank) + "'s queues: ";
    auto corrupt = [&](const std::string &why) { throw CorruptQueue(who + why); };
    if (q->magic != queue_magic || q->version != queue_version)
        corrupt("bad magic or version (" + std::to_string(q->magic) + ", " + std::to_string(q->version) +
                ")");
    if (q->packet_size != packet_size || q->send_slots != send_slots || q->recv_slots != recv_slots)
        corrupt("sizes " + std::to_string(q->packet_size) + "/" + std::to_string(q->send_slots) + "/" +
                std::to_string(q->recv_slots) + " instead of " + std::to_string(packet_size) + "/" +
                std::to_string(send_slots) + "/" + std::to_string(recv_slots));
    if (share_bytes_needed(packet_size, send_slots, recv_slots) > bytes)
        corrupt("a share of " + std::to_string(bytes) + " bytes cannot hold its slots");
    uint64_t sh = q->send_head.load(std::memory_order_acquire),
             st = q->send_tail.load(std::memory_order_acquire);
    uint64_t rh = q->recv_head.load(std::memory_order_acquire),
             rt = q->recv_tail.load(std::memory_order_acquire);
    if (st < sh || st - sh > send_slots)
        corrupt("impossible " + pair_text("send", sh, st, send_slots));
    if (rt < rh || rt - rh > recv_slots)
        corrupt("impossible " + pair_text("recv", rh, rt, recv_slots));

    StoreHeader h{};
    h.magic = store_magic;
    h.valid_only = valid_only ? 1 : 0;
    h.bytes = bytes;
    h.packet_size = packet_size;
    h.send_slots = send_slots;
    h.recv_slots = recv_slots;
    std::string out;
    size_t saved;
    const auto *base = static_cast<const uint8_t *>(share);
    if (valid_only) {
        h.send_first = sh;
        h.send_count = st - sh + (st - sh < send_slots ? 1 : 0);
        h.recv_first = rh;
        h.recv_count = rt - rh;
        saved = h.send_count + h.recv_count;
        out.reserve(sizeof h + sizeof(QueueHeader) + saved * packet_size);
        out.append(reinterpret_cast<const char *>(&h), sizeof h);
        out.append(reinterpret_cast<const char *>(base), sizeof(QueueHeader));
        auto *qq = const_cast<QueueHeader *>(q); // the slot helpers take a non-const header
        for (uint64_t i = 0; i < h.send_count; ++i)
            out.append(reinterpret_cast<const char *>(send_slot(qq, h.send_first + i)), packet_size);
        for (uint64_t i = 0; i < h.recv_count; ++i)
            out.append(reinterpret_cast<const char *>(recv_slot(qq, h.recv_first + i)), packet_size);
    } else {
        saved = size_t{send_slots} + recv_slots;
        out.reserve(sizeof h + bytes);
        out.append(reinterpret_cast<const char *>(&h), sizeof h);
        out.append(reinterpret_cast<const char *>(base), bytes);
    }
    store.swap(out);
    return saved;
}

void restore_share(void *share, uint64_t bytes, const std::string &store)
{
    StoreHeader h;
    if (store.size() < sizeof h)
        throw std::invalid_argument("not a saved share (" + std::to_string(store.size()) + " bytes)");
    std::memcpy(&h, store.data(), sizeof h);
    if (h.magic != store_magic)
        throw std::invalid_argument("not a saved share (bad magic)");
    if (h.bytes != bytes)
        throw std::invalid_argument("saved share of " + std::to_string(h.bytes) +
                                    " bytes restored into one of " + std::to_string(bytes));
    const char *p = store.data() + sizeof h;
    auto *base = static_cast<uint8_t *>(share);
    if (!h.valid_only) {
        if (store.size() != sizeof h + bytes)
            throw std::invalid_argument("truncated saved share");
        std::memcpy(base, p, bytes);
        return;
    }
    if (store.size() != sizeof h + sizeof(QueueHeader) + (h.send_count + h.recv_count) * h.packet_size)
        throw std::invalid_argument("truncated saved share");
    std::memcpy(base, p, sizeof(QueueHeader));
    p += sizeof(QueueHeader);
    auto *q = static_cast<QueueHeader *>(share);
    for (uint64_t i = 0; i < h.send_count; ++i, p += h.packet_size)
        std::memcpy(send_slot(q, h.send_first + i), p, h.packet_size);
    for (uint64_t i = 0; i < h.recv_count; ++i, p += h.packet_size)
        std::memcpy(recv_slot(q, h.recv_first + i), p, h.packet_size);
}

size_t reload_share(void *share, uint64_t bytes, const std::string &store)
{
    StoreHeader h;
    if (store.size() < sizeof h + sizeof(QueueHeader))
        throw std::invalid_argument("not a saved share (" + std::to_string(store.size()) + " bytes)");
    std::memcpy(&h, store.data(), sizeof h);
    if (h.magic != store_magic || h.bytes != bytes)
        throw std::invalid_argument("not a saved share of " + std::to_string(bytes) + " bytes");
    QueueHeader saved;
    std::memcpy(static_cast<void *>(&saved), store.data() + sizeof h, sizeof saved);
    auto *q = static_cast<QueueHeader *>(share);
    uint64_t st = saved.send_tail.load(std::memory_order_relaxed);
    if (q->send_head.load(std::memory_order_acquire) != saved.send_head.load(std::memory_order_relaxed) ||
        q->send_tail.load(std::memory_order_acquire) != st ||
        q->recv_head.load(std::memory_order_acquire) != saved.recv_head.load(std::memory_order_relaxed) ||
        q->recv_tail.load(std::memory_order_acquire) != saved.recv_tail.load(std::memory_order_relaxed))
        return 0;
    size_t n = 0;
    if (!h.valid_only) {
        // The whole window but the send ring's free slots: from the tail on
        // the application may be writing (its job runs when a context comes
        // back in late), and the index check above does not hold it off.
        if (store.size() != sizeof h + bytes)
            throw std::invalid_argument("truncated saved share");
        const char *p = store.data() + sizeof h;
        auto *base = static_cast<uint8_t *>(share);
        uint64_t sh = saved.send_head.load(std::memory_order_relaxed);
        for (uint64_t i = sh; i < st; ++i) {
            uint8_t *slot = send_slot(q, i);
            std::memcpy(slot, p + (slot - base), h.packet_size);
        }
        size_t ring_end = sizeof(QueueHeader) + size_t{h.send_slots} * h.packet_size;
        std::memcpy(base + ring_end, p + ring_end, bytes - ring_end);
        return static_cast<size_t>(st - sh) + h.recv_slots;
    }
    if (store.size() != sizeof h + sizeof(QueueHeader) + (h.send_count + h.recv_count) * h.packet_size)
        throw std::invalid_argument("truncated saved share");
    const char *p = store.data() + sizeof h + sizeof(QueueHeader);
    for (uint64_t i = 0; i < h.send_count; ++i, p += h.packet_size)
        if (h.send_first + i != st) {
            std::memcpy(send_slot(q, h.send_first + i), p, h.packet_size);
            ++n;
        }
    for (uint64_t i = 0; i < h.recv_count; ++i, p += h.packet_size, ++n)
        std::memcpy(recv_slot(q, h.recv_first + i), p, h.packet_size);
    return n;
}

} // namespace storm::rdma
