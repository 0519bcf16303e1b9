// ChunkBuffers (lib/net/mcast.hpp): the buffers multicast chunks are
// received into, mappings of their own kept for the chunks to come.  A
// buffer belongs to the shared_ptr get() returns until its last reference
// drops; it then goes back to the set (up to `keep` of them), or is
// unmapped.
#include "lib/net/mcast.hpp"

#include <algorithm>
#include <new>
#include <sys/mman.h>

namespace storm::net {
namespace {

// Chunk buffers are mappings of their own that forked children do not
// inherit (MADV_DONTFORK).  slurmd, which the agents run in, forks for
// every job step it starts (and stock sbcast for every block it writes);
// after a fork, every page a process shares with its child is write
// protected, and the agents' next writes into their buffers fault on each
// page: a 12 MB storm-bcast to 256 virtual nodes right after an srun took
// about 225,000 page faults, against 4,000 after another broadcast.
char *map_buffer(size_t n)
{
    void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        throw std::bad_alloc();
    madvise(p, n, MADV_DONTFORK); // best effort: faults, not failures, without it
    return static_cast<char *>(p);
}

void unmap_buffer(char *p, size_t n) noexcept { munmap(p, n); }

} // namespace

ChunkBuffers::~ChunkBuffers()
{
    for (auto &f : free_)
        unmap_buffer(f.second, f.first);
}

std::shared_ptr<char[]> ChunkBuffers::get(size_t len, bool &reused)
{
    size_t capacity;
    return get(len, reused, capacity);
}

std::shared_ptr<char[]> ChunkBuffers::get(size_t len, bool &reused, size_t &capacity)
{
    char *p = nullptr;
    capacity = std::max<size_t>(len, kMcastChunkSize);
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = free_.begin(); it != free_.end(); ++it)
            if (it->first >= len) {
                capacity = it->first;
                p = it->second;
                free_.erase(it);
                break;
            }
    }
    reused = p != nullptr;
    if (!p)
        p = map_buffer(capacity);
    try {
        return std::shared_ptr<char[]>(p, [w = weak_from_this(), capacity](char *b) {
            if (auto set = w.lock())
                set->put(b, capacity);
            else
                unmap_buffer(b, capacity);
        });
    } catch (...) {
        unmap_buffer(p, capacity); // the control block could not be allocated
        throw;
    }
}

size_t ChunkBuffers::kept() const
{
    std::lock_guard<std::mutex> lock(mu_);
    return free_.size();
}

void ChunkBuffers::put(char *p, size_t capacity) noexcept
{
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (free_.size() < keep_) { // reserved: no allocation here
            free_.emplace_back(capacity, p);
            return;
        }
    }
    unmap_buffer(p, capacity);
}

} // namespace storm::net
