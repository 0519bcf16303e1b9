// Stopping a worker thread that waits on a condition variable for a flag.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace storm {

// Sets `flag` under `mu`, wakes every waiter of `cv` and joins `worker` (if
// it was started).  The worker must read `flag` under `mu` (wait_for with
// a predicate) so that the wake-up cannot be lost.
inline void stop_thread(std::mutex &mu, bool &flag, std::condition_variable &cv, std::thread &worker)
{
    {
        std::lock_guard<std::mutex> lk(mu);
        flag = true;
    }
    cv.notify_all();
    if (worker.joinable())
        worker.join();
}

} // namespace storm
