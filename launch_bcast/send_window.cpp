#include "launch_bcast/send_window.hpp"

namespace storm::bcast {

SendWindow::SendWindow(unsigned max, unsigned initial, std::chrono::milliseconds timeout)
    : max_(std::max(2u, max)), size_(std::clamp(initial, 2u, std::max(2u, max))),
      grow_below_(timeout / 8), cut_above_(timeout / 4)
{
}

void SendWindow::answered(clock::time_point sent, clock::time_point now)
{
    const clock::duration took = now - sent;
    if (took > cut_above_) {
        if (sent >= last_cut_) {
            size_ = std::max(2u, size_ / 2);
            last_cut_ = now;
        }
    } else if (took < grow_below_ && size_ < max_) {
        ++size_;
    }
}

} // namespace storm::bcast
