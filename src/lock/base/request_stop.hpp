// What stops an attempt's request: the caller's cancellation, or the wait's deadline. Either is
// honoured only while the request is unsent (the engine's rule): a request on its way is read to
// its end, so that a grant is never lost track of. Private to the library's sources; on the
// strand of the coroutine that makes the request.
#pragma once

#include "lock/base/common.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <optional>

namespace colock::detail {

class request_stop {
public:
    // Until destroyed, `cs`'s cancellation (any type) and `deadline` (none: max()) emit a
    // total cancellation on slot().
    request_stop(boost::asio::cancellation_state cs,
                 boost::asio::strand<boost::asio::any_io_executor> const& strand,
                 clock_type::time_point deadline)
        : signal_(std::make_shared<boost::asio::cancellation_signal>()), caller_(cs.slot()) {
        if (caller_.is_connected())
            caller_.assign([signal = signal_](boost::asio::cancellation_type) {
                signal->emit(boost::asio::cancellation_type::total);
            });
        if (deadline != clock_type::time_point::max()) {
            timer_.emplace(strand);
            timer_->expires_at(deadline);
            timer_->async_wait([signal = signal_](boost::system::error_code ec) {
                if (!ec)
                    signal->emit(boost::asio::cancellation_type::total);
            });
        }
    }
    request_stop(request_stop const&) = delete;
    request_stop& operator=(request_stop const&) = delete;
    ~request_stop() {
        if (caller_.is_connected())
            caller_.clear();
        if (timer_)
            timer_->cancel();
    }

    // Where the request is told to stop.
    boost::asio::cancellation_slot slot() const { return signal_->slot(); }

private:
    std::shared_ptr<boost::asio::cancellation_signal> signal_; // shared with its emitters
    boost::asio::cancellation_slot caller_;
    std::optional<lock_timer> timer_;
};

} // namespace colock::detail
