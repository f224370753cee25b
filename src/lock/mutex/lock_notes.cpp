// The observer's events and the loss warning of a locker.
#include "lock/mutex/lock_notes.hpp"

#include "lock/mutex/guard.hpp"

#include <fmt/format.h>

namespace colock::detail {

using std::chrono::milliseconds;

void lock_notes::acquired(guard_state const& st, clock_type::time_point call_started, int attempts,
                          bool waited) const {
    if (!observer_)
        return;
    auto const how = st.from_retention()       ? acquired_by::retained
                     : st.local_handoffs() > 0 ? acquired_by::local_handoff
                     : waited                  ? acquired_by::server_after_wait
                                               : acquired_by::first_attempt;
    observer_->on_acquired(
        {st.name(), st.fence(), clock_type::now() - call_started, attempts, how, st.keys().kind});
}

void lock_notes::queue(std::string const& name, std::size_t waiters, std::string_view kind) const {
    if (observer_)
        observer_->on_queue({name, waiters, kind});
}

void lock_notes::released(guard_state const& st, bool handed_locally, bool retained) const {
    if (observer_ && !st.lost())
        observer_->on_released({st.name(), st.fence(), clock_type::now() - st.acquired_at(),
                                handed_locally, retained, st.keys().kind});
}

void lock_notes::lost(guard_state const& st, loss_reason why) const {
    if (store_.logs(log_level::warning)) {
        auto const held =
            std::chrono::duration_cast<milliseconds>(clock_type::now() - st.acquired_at());
        store_.log(
            log_level::warning,
            fmt::format(
                "lock '{}' (fence {}) lost after {} ms: {}", st.name(), st.fence(), held.count(),
                why == loss_reason::not_ours  ? "the server no longer holds it for this holder"
                : why == loss_reason::expired ? "its lease ran out with no renewal confirmed"
                : why == loss_reason::forced  ? "it was ended by a forced unlock"
                                              : "the server instance that held it was replaced"));
    }
    if (observer_)
        observer_->on_lost(
            {st.name(), st.fence(), why, clock_type::now() - st.acquired_at(), st.keys().kind});
}

void lock_notes::renewal(guard_state const& st, clock_type::duration latency, bool extended,
                         boost::system::error_code ec) const {
    if (observer_)
        observer_->on_renewal({st.name(), st.fence(), latency, extended, ec, st.keys().kind});
}

void lock_notes::reconnect() const {
    if (observer_)
        observer_->on_reconnect({store_.reconnects()});
}

} // namespace colock::detail
