// What a locker tells its observer and its connection's log: acquisitions, the local queue's
// length, releases, losses (also a warning line) and renewals, each event built only when
// someone listens. Private to the library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_observer.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace colock::detail {

class guard_state;

class lock_notes {
public:
    // `store` outlives this (both belong to the locker): its log hook is the connection's.
    explicit lock_notes(lease_store& store) : store_(store) {}

    void set_observer(std::shared_ptr<lock_observer> observer) noexcept {
        observer_ = std::move(observer);
    }
    lock_observer* observer() const noexcept { return observer_.get(); }

    // A call made at `call_started` got `st` after `attempts` attempts; `waited`: it queued.
    void acquired(guard_state const& st, clock_type::time_point call_started, int attempts,
                  bool waited) const;
    void queue(std::string const& name, std::size_t waiters, std::string_view kind) const;
    void released(guard_state const& st, bool handed_locally, bool retained) const;
    void lost(guard_state const& st, loss_reason why) const;
    void renewal(guard_state const& st, clock_type::duration latency, bool extended,
                 boost::system::error_code ec) const;
    void reconnect() const;

private:
    lease_store& store_;
    std::shared_ptr<lock_observer> observer_;
};

} // namespace colock::detail
