// Small helpers shared by the units of the lock layer. Private to the library's sources.
#pragma once

#include "../detail/awaitable_tokens.hpp"

#include <boost/asio/cancellation_state.hpp>

#include <chrono>

namespace colock::detail {

using clock_type = std::chrono::steady_clock;

// t + d, saturated at the clock's end: a very long wait or hold must never wrap round into the
// past. (Adding milliseconds::max() to a time point overflows even before the addition: the
// conversion to the clock's nanoseconds does.)
inline clock_type::time_point saturating_add(clock_type::time_point t,
                                             std::chrono::milliseconds d) {
    if (d.count() <= 0)
        return t;
    auto const room =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::time_point::max() - t);
    return d >= room ? clock_type::time_point::max() : t + d;
}

inline bool cancelled(boost::asio::cancellation_state const& cs) {
    return cs.cancelled() != boost::asio::cancellation_type::none;
}

} // namespace colock::detail
