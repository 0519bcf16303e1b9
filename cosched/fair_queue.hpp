// A queue served in turns between keys (the channel's registrations,
// keyed by the peer's uid): each key with work waiting gets one item per
// round, in the order the keys first had work.  One user who queues many
// items delays another user's next item by at most one of its own, not by
// all of them.
//
// Contract: not thread safe (the channel holds its mutex around it).
// Keys with nothing waiting cost nothing.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <utility>

namespace storm::cosched {

template <typename Key, typename T> class FairQueue {
public:
    void push(const Key &k, T item)
    {
        auto &q = waiting_[k];
        if (q.empty())
            turns_.push_back(k);
        q.push_back(std::move(item));
        ++size_;
    }
    bool empty() const noexcept { return size_ == 0; }
    size_t size() const noexcept { return size_; }
    // The first item of the key whose turn it is (the queue must not be
    // empty); that key goes to the back of the turns if it has more.
    T pop()
    {
        Key k = turns_.front();
        turns_.pop_front();
        auto it = waiting_.find(k);
        T item = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty())
            waiting_.erase(it);
        else
            turns_.push_back(k);
        --size_;
        return item;
    }

private:
    std::map<Key, std::deque<T>> waiting_; // non-empty queues only
    std::deque<Key> turns_;                // each key of waiting_ once
    size_t size_ = 0;
};

} // namespace storm::cosched
