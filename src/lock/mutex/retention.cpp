// Lease retention: what is kept, when it goes back, and the wake channel it listens on.
#include "lock/mutex/retention.hpp"

#include "lock/core/acquire_policy.hpp"
#include "lock/mutex/cohort.hpp"
#include "lock/mutex/guard.hpp"

#include <colock/redis/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <algorithm>

namespace colock::detail {

namespace asio = boost::asio;

retained_leases::~retained_leases() {
    for (auto const& [channel, e] : names_)
        if (e->kept)
            // The locker's strand is gone with its io_context: no retry, no UNSUBSCRIBE (the
            // connection's close drops its subscriptions).
            context_.store().release_in_background(e->keys, e->kept->lease_token, e->claim,
                                                   e->kept->fence, e->kept->written, [] {});
}

retained_leases::entry_ptr retained_leases::find(std::string const& channel) const {
    if (entries_.load(std::memory_order_relaxed) == 0)
        return nullptr; // every co_lock and let-go asks: no lock for a locker that keeps nothing
    std::lock_guard lock(mutex_);
    auto const it = names_.find(channel);
    return it == names_.end() ? nullptr : it->second;
}

retained_leases::entry_ptr retained_leases::entry_for(lock_keys const& keys) {
    entry_ptr e;
    {
        std::lock_guard lock(mutex_);
        auto& slot = names_[keys.channel];
        if (!slot) {
            slot = std::make_shared<name_entry>(keys, lock_timer(context_.strand()));
            entries_.store(names_.size(), std::memory_order_relaxed);
        }
        e = slot;
    }
    if (!e->subscribed)
        subscribe(e);
    return e;
}

void retained_leases::watch(lock_keys const& keys) {
    {
        std::lock_guard lock(mutex_);
        closing_ = false; // Redis grants again: the connection is in use
    }
    if (!closed_ && !refused_)
        entry_for(keys);
}

void retained_leases::let_go_pending(std::shared_ptr<guard_state> const& st) {
    std::lock_guard lock(mutex_);
    // Those whose let-go was destroyed unrun (the io_context shut down) are gone.
    std::erase_if(pending_, [](auto const& p) { return p.expired(); });
    pending_.push_back(st);
}

bool retained_leases::let_go_arrived(guard_state const& st) {
    std::lock_guard lock(mutex_);
    auto const it = std::find_if(pending_.begin(), pending_.end(),
                                 [&st](auto const& p) { return p.lock().get() == &st; });
    if (it == pending_.end())
        return false;
    pending_.erase(it);
    return true;
}

bool retained_leases::keep(guard_state& st) {
    auto const& opt = st.options();
    // A lease with a record (an election's term) is not kept: its release ends the record.
    // Nor one that a call here is asking Redis for, or waits on: it goes to them.
    if (opt.retain.count() <= 0 || closed_ || refused_ || !opt.auto_renew || st.gone() ||
        st.others_queued_at_grant() || !st.keys().record_key.empty() ||
        !context_.store().is_connected() || queues_.busy(st.keys()) ||
        st.server_generation() != context_.store().server_changes(st.keys()))
        return false;
    auto const now = clock_type::now();
    auto const next_fence = st.fence() + 1;
    if (!fence_in_step(next_fence, st.lease_fence(), st.lease_granted_at(), now))
        return false;
    // Nobody renews a kept lease: it goes back by the time a holder would have renewed it, so
    // that whoever takes it gets the lease a holder would have.
    auto const until = std::min(saturating_add(now, opt.retain), st.renewal_due());
    if (until <= now || !lease_left_to_pass(st.deadline(), now))
        return false;
    auto const e = entry_for(st.keys());
    {
        std::lock_guard lock(mutex_);
        if (closing_ || e->others_queued)
            return false;
        e->claim = handoff_claim(opt.ttl);
        e->kept = lease_baton{st.lease_token(),
                              st.lease_fence(),
                              next_fence,
                              st.lease_granted_at(),
                              st.deadline(),
                              st.local_handoffs() + 1,
                              st.server_generation(),
                              false,
                              st.written()};
    }
    e->until = until;
    arm(e);
    return true;
}

std::optional<lease_baton> retained_leases::take(lock_keys const& keys) {
    auto const e = find(keys.channel);
    if (!e)
        return std::nullopt;
    std::optional<lease_baton> baton;
    {
        std::lock_guard lock(mutex_);
        baton = std::exchange(e->kept, std::nullopt);
    }
    if (!baton)
        return std::nullopt;
    auto const now = clock_type::now();
    // A lease whose server was replaced meanwhile is gone there; one near its end would give a
    // guard over at once. They go back, and the call asks Redis. So does one kept while the
    // connection is down: until it is back and has read the server's run_id, a replaced server
    // is not known as replaced, and another process may hold the name there.
    if (!context_.store().is_connected() ||
        baton->server_changes != context_.store().server_changes(keys) ||
        !lease_left_to_pass(baton->deadline, now) ||
        !fence_in_step(baton->fence, baton->lease_fence, baton->granted_at, now)) {
        handoffs_.give_back(keys, std::move(*baton), e->claim);
        drop(e);
        return std::nullopt;
    }
    return baton;
}

void retained_leases::forget(lock_keys const& keys) {
    if (auto e = find(keys.channel))
        drop(e);
}

void retained_leases::on_queued(std::string const& channel) {
    auto const e = find(channel);
    if (!e)
        return;
    bool kept = false;
    {
        std::lock_guard lock(mutex_);
        e->others_queued = true;
        kept = e->kept.has_value();
        if (kept)
            e->kept->written.reset(); // the key now says a locker is queued
    }
    if (kept)
        drop(e); // gives it back; a guard that holds it gives it back at its let-go
}

void retained_leases::give_all_back() {
    std::vector<entry_ptr> kept;
    {
        std::lock_guard lock(mutex_);
        for (auto const& [channel, e] : names_) {
            e->others_queued = true;
            if (e->kept)
                kept.push_back(e);
        }
    }
    for (auto const& e : kept)
        drop(e);
}

void retained_leases::close() {
    closed_ = true;
    give_all_back();
}

void retained_leases::on_forced(std::string_view key, std::string_view token) {
    std::vector<entry_ptr> ended;
    {
        std::lock_guard lock(mutex_);
        for (auto const& [channel, e] : names_)
            if (e->keys.key == key && e->kept && e->kept->lease_token == token)
                ended.push_back(e);
    }
    // The key no longer holds the lease: the give-back changes nothing there (with Redlock
    // the store forgets the lease).
    for (auto const& e : ended)
        drop(e);
}

void retained_leases::give_all_back_now() noexcept {
    try {
        std::vector<std::pair<entry_ptr, lease_baton>> kept;
        std::vector<std::weak_ptr<guard_state>> pending;
        {
            std::lock_guard lock(mutex_);
            closing_ = true;
            for (auto const& [channel, e] : names_) {
                e->others_queued = true;
                if (auto baton = std::exchange(e->kept, std::nullopt))
                    kept.emplace_back(e, std::move(*baton));
            }
            pending.swap(pending_);
        }
        for (auto const& entry_and_baton : kept) {
            auto const& e = entry_and_baton.first;
            auto const& baton = entry_and_baton.second;
            // A passing failure leaves it to the retrying release on the strand.
            context_.store().release_in_background(
                e->keys, baton.lease_token, e->claim, baton.fence, baton.written,
                [handoffs = life_.share(handoffs_), keys = e->keys, baton, claim = e->claim] {
                    handoffs->give_back(keys, baton, claim);
                });
        }
        for (auto const& weak : pending)
            if (auto st = weak.lock())
                release_now(std::move(st));
    } catch (...) {
        // Out of memory: what was not handed to the connection runs out by its ttl.
    }
}

void retained_leases::drop_all() {
    std::vector<entry_ptr> entries;
    {
        std::lock_guard lock(mutex_);
        for (auto const& [channel, e] : names_)
            entries.push_back(e);
    }
    for (auto const& e : entries)
        drop(e);
}

void retained_leases::arm(entry_ptr const& e) {
    if (e->armed && e->armed_at <= e->until)
        return; // fires first, and sets itself again for the rest
    e->armed = true;
    e->armed_at = e->until;
    e->timer.expires_at(e->until);
    e->timer.async_wait([owner = std::weak_ptr<retained_leases>(life_.hold(*this)),
                         weak = std::weak_ptr<name_entry>(e)](boost::system::error_code ec) {
        auto const self = owner.lock();
        auto const entry = weak.lock();
        if (ec || !self || !entry)
            return;
        self->expire(entry);
    });
}

void retained_leases::expire(entry_ptr const& e) {
    e->armed = false;
    if (find(e->keys.channel) != e)
        return; // dropped
    bool kept = false;
    {
        std::lock_guard lock(mutex_);
        kept = e->kept.has_value();
    }
    if (!kept)
        return; // held by a guard, which sets it again at its let-go
    if (clock_type::now() < e->until) {
        arm(e);
        return;
    }
    drop(e);
}

void retained_leases::subscribe(entry_ptr const& e) {
    e->subscribed = true;
    auto run = [](std::shared_ptr<retained_leases> self, entry_ptr entry) -> asio::awaitable<void> {
        auto const answer = co_await self->context_.store().subscribe(entry->keys.channel);
        if (!answer.first)
            co_return;
        // Not listening, so a waiter elsewhere would not be heard: the lease goes back. A refusal
        // (an ACL user without the channel) stands for the locker; a connection that could not
        // be reached is tried again at the next grant.
        entry->subscribed = false;
        if (answer.first == redis::error::server_error)
            self->refused_ = true;
        self->drop(entry);
    };
    asio::co_spawn(context_.strand(), run(life_.share(*this), e), asio::detached);
}

void retained_leases::drop(entry_ptr const& e) {
    std::optional<lease_baton> baton;
    {
        std::lock_guard lock(mutex_);
        baton = std::exchange(e->kept, std::nullopt);
        auto const it = names_.find(e->keys.channel);
        if (it != names_.end() && it->second == e) {
            names_.erase(it);
            entries_.store(names_.size(), std::memory_order_relaxed);
        }
    }
    if (e->armed) {
        e->armed = false;
        e->timer.cancel();
    }
    if (std::exchange(e->subscribed, false))
        context_.store().unsubscribe(e->keys.channel);
    if (baton)
        handoffs_.give_back(e->keys, std::move(*baton), e->claim);
}

} // namespace colock::detail
