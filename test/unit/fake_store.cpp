#include "fake_store.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::test {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;
using clock_type = fake_server::clock_type;

namespace {

constexpr auto nothrow_wait = asio::as_tuple(asio::use_awaitable);

milliseconds left(clock_type::time_point until) {
    return std::max(milliseconds(0),
                    std::chrono::duration_cast<milliseconds>(until - clock_type::now()));
}

} // namespace

// ------------------------------------------------------------------ the server's rules

fake_server::lock_entry* fake_server::find(std::string const& key) {
    auto it = locks_.find(key);
    if (it == locks_.end())
        return nullptr;
    if (it->second.expires <= clock_type::now()) {
        locks_.erase(it);
        return nullptr;
    }
    return &it->second;
}

std::optional<fake_server::lock_entry> fake_server::lock(std::string const& key) {
    if (auto* e = find(key))
        return *e;
    return std::nullopt;
}

std::vector<std::string> fake_server::queue(std::string const& key) {
    std::vector<std::string> out;
    auto const now = clock_type::now();
    for (auto const& [owner, deadline] : queues_[key])
        if (deadline >= now)
            out.push_back(owner);
    return out;
}

void fake_server::enqueue(std::string const& key, std::string const& owner) {
    auto& q = queues_[key];
    auto const deadline = clock_type::now() + queue_entry_ttl;
    for (auto& entry : q)
        if (entry.first == owner) {
            entry.second = deadline; // a refresh keeps its place
            return;
        }
    q.emplace_back(owner, deadline);
}

void fake_server::dequeue(std::string const& key, std::string const& owner) {
    std::erase_if(queues_[key], [&](auto const& entry) { return entry.first == owner; });
}

void fake_server::publish(std::string const& channel, std::string const& payload) {
    ++calls_.publishes;
    if (payload == "q" && lose_q_messages > 0) {
        --lose_q_messages;
        return;
    }
    for (auto* s : stores_)
        s->deliver(channel, payload);
}

grant_result fake_server::grant(lock_keys const& keys, std::string const& token, milliseconds ttl,
                                queueing mode) {
    ++calls_.grants;
    grant_result r;
    auto const now = clock_type::now();
    auto* e = find(keys.key);
    auto give = [&](std::int64_t fence) {
        ++calls_.leases;
        dequeue(keys.key, keys.owner);
        if (mode == queueing::stay_after_grant)
            enqueue(keys.key, keys.owner);
        auto const live = queue(keys.key);
        auto const others =
            std::count_if(live.begin(), live.end(), [&](auto const& o) { return o != keys.owner; });
        lock_entry held;
        held.kind = lock_entry::state::held;
        held.fence = fence;
        held.owner = keys.owner;
        held.token = token;
        held.queued = others > 0 ? 2 : mode == queueing::stay_after_grant ? 1 : 0;
        held.expires = now + ttl;
        locks_[keys.key] = held;
        r.granted = true;
        r.fence = fence;
        r.others_queued = held.queued == 2;
        return r;
    };
    if (!e) {
        // Gone (a lease that lapsed, a forced unlock's quarantine over): to the first live
        // entry, as a release hands it; the asker, when it is not that one, queues behind.
        auto const live = queue(keys.key);
        if (!live.empty() && live.front() != keys.owner) {
            auto const claim = colock::detail::handoff_claim(ttl);
            hand_off(keys, fresh_fence_ += 1000, "", claim);
            if (mode != queueing::never)
                enqueue(keys.key, keys.owner);
            r.holder_ttl = claim;
            return r;
        }
        return give(fresh_fence_ += 1000);
    }
    if (e->kind == lock_entry::state::free)
        return give(e->fence + 1);
    if (e->kind == lock_entry::state::handed) {
        if (e->owner == keys.owner)
            return give(e->fence + 1);
        if (mode != queueing::never)
            enqueue(keys.key, keys.owner);
        r.holder_ttl = left(e->expires);
        return r;
    }
    // Held.
    if (e->token == token) {
        e->expires = now + ttl;
        r.granted = true;
        r.fence = e->fence;
        r.others_queued = e->queued == 2;
        return r;
    }
    r.holder_ttl = left(e->expires);
    if (mode != queueing::never) {
        enqueue(keys.key, keys.owner);
        if (e->owner != keys.owner)
            e->queued = 2;
        else if (e->queued == 0)
            e->queued = 1;
        if (e->owner != keys.owner)
            publish(keys.channel_prefix + e->owner, "q");
        r.others_queued = e->owner == keys.owner && e->queued == 2;
    } else if (e->owner == keys.owner) {
        r.others_queued = e->queued == 2;
    }
    return r;
}

lease_reply fake_server::extend(lock_keys const& keys, std::string const& token, milliseconds ttl,
                                std::int64_t fence) {
    ++calls_.extends;
    auto* e = find(keys.key);
    if (!e || e->kind != lock_entry::state::held || e->token != token)
        return {{}, false};
    e->expires = clock_type::now() + ttl;
    e->fence = std::max(e->fence, fence);
    return {{}, true};
}

bool fake_server::hand_off(lock_keys const& keys, std::int64_t fence, std::string const& releasing,
                           milliseconds claim) {
    auto const live = queue(keys.key);
    std::string next;
    for (auto const& owner : live)
        if (owner != releasing) {
            next = owner;
            break;
        }
    if (next.empty() && !live.empty())
        next = live.front(); // only the releasing process's own entry: it goes to it
    if (next.empty())
        return false;
    dequeue(keys.key, next);
    lock_entry handed;
    handed.kind = lock_entry::state::handed;
    handed.fence = fence;
    handed.owner = next;
    handed.expires = clock_type::now() + claim;
    locks_[keys.key] = handed;
    publish(keys.channel_prefix + next, "g");
    return true;
}

lease_reply fake_server::release(lock_keys const& keys, std::string const& token,
                                 milliseconds claim, std::int64_t last_fence, bool leave_free) {
    ++calls_.releases;
    auto* e = find(keys.key);
    if (!e || e->kind != lock_entry::state::held || e->token != token)
        return {{}, false};
    auto const fence = std::max(e->fence, last_fence);
    if (e->queued != 0 && !leave_free && hand_off(keys, fence, e->owner, claim))
        return {{}, true, true};
    e->kind = lock_entry::state::free;
    e->fence = fence;
    e->token.clear();
    e->owner.clear();
    return {{}, true, false};
}

void fake_server::leave(lock_keys const& keys, milliseconds claim) {
    ++calls_.leaves;
    dequeue(keys.key, keys.owner);
    auto* e = find(keys.key);
    if (e && e->kind == lock_entry::state::handed && e->owner == keys.owner &&
        !hand_off(keys, e->fence, "", claim)) {
        e->kind = lock_entry::state::free;
        e->owner.clear();
    }
}

void fake_server::replace() {
    locks_.clear();
    queues_.clear();
    ++changes_;
    for (auto* s : stores_)
        s->server_replaced();
}

void fake_server::reconnect() {
    for (auto* s : stores_)
        s->reconnected();
}

void fake_server::away() {
    away_ = true;
}

void fake_server::back() {
    away_ = false;
    for (auto& resume : std::exchange(on_back, {}))
        resume();
}

// ------------------------------------------------------------------ one process's store

fake_store::fake_store(fake_server& server, asio::any_io_executor ex)
    : server_(server), strand_(asio::make_strand(ex)) {
    server_.attach(this);
}

fake_store::~fake_store() {
    server_.detach(this);
}

asio::awaitable<bool> fake_store::send(std::optional<asio::cancellation_slot> stop) {
    if (!server_.is_away())
        co_return true;
    // Unsent until the server is back; a cancellation ends the wait, and nothing ran.
    auto wait = std::make_shared<asio::steady_timer>(strand_, clock_type::time_point::max());
    server_.on_back.push_back([weak = std::weak_ptr<asio::steady_timer>(wait)] {
        if (auto w = weak.lock())
            w->cancel();
    });
    if (stop)
        co_await wait->async_wait(asio::bind_cancellation_slot(*stop, nothrow_wait));
    else
        co_await wait->async_wait(nothrow_wait);
    co_return !server_.is_away();
}

asio::awaitable<void> fake_store::reply_delay() {
    // On the lock clock, so that virtual time moves replies on too.
    detail::lock_timer t(strand_, server_.latency);
    // Once sent, the reply is read: the caller's cancellation does not cut it short.
    co_await t.async_wait(asio::bind_cancellation_slot(asio::cancellation_slot(), nothrow_wait));
}

asio::awaitable<void> fake_store::forever() {
    asio::steady_timer t(strand_, clock_type::time_point::max());
    co_await t.async_wait(nothrow_wait);
}

namespace {

// The fault for the next request, if any.
std::optional<fault> next_fault(std::deque<fault>& faults) {
    if (faults.empty())
        return std::nullopt;
    auto f = faults.front();
    faults.pop_front();
    return f;
}

template <class Result>
Result refusal(fault const& f) {
    Result r{};
    r.ec = redis::error::server_error;
    if constexpr (requires { r.server_text; })
        r.server_text = f.text;
    return r;
}

} // namespace

asio::awaitable<grant_result> fake_store::grant(lock_keys const& keys, std::string const& token,
                                                milliseconds ttl, queueing queue,
                                                asio::cancellation_slot stop, replica_wait) {
    if (!co_await send(stop)) {
        grant_result r;
        r.ec = asio::error::operation_aborted;
        co_return r;
    }
    auto const f = next_fault(server_.grant_faults);
    if (f && f->what == fault::kind::refused) {
        co_await reply_delay();
        co_return refusal<grant_result>(*f);
    }
    if (f && f->what == fault::kind::lost_before) {
        co_await reply_delay();
        grant_result r;
        r.ec = redis::error::connection_lost;
        co_return r;
    }
    auto r = server_.grant(keys, token, ttl, queue);
    co_await reply_delay();
    if (f) { // lost after it ran (never_answers counts as lost: the reply is read to its end)
        grant_result lost;
        lost.ec = redis::error::connection_lost;
        lost.outcome_unknown = true;
        co_return lost;
    }
    co_return r;
}

asio::awaitable<lease_reply> fake_store::lease_request(std::deque<fault>& faults, bool each_fault,
                                                       std::function<lease_reply()> run) {
    if (!co_await send(std::nullopt))
        co_return lease_reply{asio::error::operation_aborted};
    auto const f = next_fault(faults);
    auto const is = [&f](fault::kind k) { return f && f->what == k; };
    if (is(fault::kind::refused)) {
        co_await reply_delay();
        co_return lease_reply{redis::error::server_error};
    }
    if (each_fault && is(fault::kind::lost_before)) {
        co_await reply_delay();
        co_return lease_reply{redis::error::connection_lost};
    }
    auto r = run();
    if (each_fault && is(fault::kind::never_answers)) {
        co_await forever(); // cancelled by the renewal's deadline
        co_return lease_reply{asio::error::operation_aborted};
    }
    co_await reply_delay();
    // Without each_fault, any fault but a refusal: lost after the script ran.
    if (each_fault ? is(fault::kind::lost_after) : f.has_value())
        co_return lease_reply{redis::error::connection_lost};
    co_return r;
}

asio::awaitable<lease_reply> fake_store::extend(lock_keys const& keys, std::string const& token,
                                                milliseconds ttl, std::int64_t fence,
                                                std::optional<detail::held_value> /*renewal*/) {
    co_return co_await lease_request(server_.extend_faults, true,
                                     [&] { return server_.extend(keys, token, ttl, fence); });
}

asio::awaitable<lease_reply> fake_store::release(lock_keys const& keys, std::string const& token,
                                                 milliseconds claim, std::int64_t last_fence,
                                                 std::optional<detail::held_value> /*written*/) {
    co_return co_await lease_request(server_.release_faults, false, [&] {
        return server_.release(keys, token, claim, last_fence, false);
    });
}

void fake_store::release_in_background(lock_keys const& keys, std::string const& token,
                                       milliseconds claim, std::int64_t last_fence,
                                       std::optional<detail::held_value> /*written*/,
                                       std::function<void()> retry) {
    if (server_.is_away()) {
        // Queued in the connection until it is back.
        server_.on_back.push_back([self = shared_from_this(), keys, token, claim, last_fence] {
            self->server_.release(keys, token, claim, last_fence, false);
        });
        return;
    }
    if (auto f = next_fault(server_.release_faults)) {
        asio::post(strand_, std::move(retry)); // a passing error: the strand tries again
        return;
    }
    server_.release(keys, token, claim, last_fence, false);
}

void fake_store::give_back_in_background(lock_keys const& keys, std::string const& token,
                                         std::function<bool()> current) {
    asio::post(strand_, [self = shared_from_this(), keys, token, current = std::move(current)] {
        if (current())
            self->server_.release(keys, token, milliseconds(0), 0, true);
    });
}

void fake_store::leave_queue(lock_keys const& keys, milliseconds claim) {
    asio::post(strand_,
               [self = shared_from_this(), keys, claim] { self->server_.leave(keys, claim); });
}

asio::awaitable<std::pair<error_code, std::string>>
fake_store::subscribe(std::string const& channel) {
    subscribed_.insert(channel);
    co_await reply_delay();
    co_return std::pair<error_code, std::string>{};
}

void fake_store::unsubscribe(std::string const& channel) {
    subscribed_.erase(channel);
}

void fake_store::listen(std::weak_ptr<channel_events> events, std::string channel_prefix) {
    events_ = std::move(events);
    channel_prefix_ = std::move(channel_prefix);
}

void fake_store::stop_listening() {
    events_.reset();
}

void fake_store::deliver(std::string const& channel, std::string const& payload) {
    if (!subscribed_.contains(channel) || !channel.starts_with(channel_prefix_))
        return;
    asio::post(strand_, [weak = events_, channel, payload] {
        if (auto events = weak.lock())
            events->on_message(channel, payload);
    });
}

void fake_store::server_replaced() {
    ++reconnects_;
    asio::post(strand_, [weak = events_] {
        if (auto events = weak.lock()) {
            events->on_server_change();
            events->on_reconnect();
        }
    });
}

void fake_store::reconnected() {
    ++reconnects_;
    asio::post(strand_, [weak = events_] {
        if (auto events = weak.lock())
            events->on_reconnect();
    });
}

asio::awaitable<lock_reading> fake_store::read(lock_keys const& keys) {
    lock_reading r;
    if (auto e = server_.lock(keys.key)) {
        r.pttl = left(e->expires).count();
        r.value = e->kind == fake_server::lock_entry::state::held
                      ? fmt::format("H {} {} {} 0 {}", e->fence, e->owner, e->token, e->queued)
                  : e->kind == fake_server::lock_entry::state::handed
                      ? fmt::format("R {} {}", e->fence, e->owner)
                      : fmt::format("F {}", e->fence);
    }
    r.queued = static_cast<std::int64_t>(server_.queue(keys.key).size());
    co_await reply_delay();
    co_return r;
}

asio::awaitable<record_reading> fake_store::read_record(std::string const&) {
    co_await reply_delay();
    co_return record_reading{};
}

void fake_store::write_record(std::string const&,
                              std::vector<std::pair<std::string, std::string>> const&,
                              milliseconds) {}

asio::awaitable<forced_unlock_result> fake_store::force_unlock(lock_keys const&,
                                                               std::string const&) {
    co_await reply_delay();
    forced_unlock_result r;
    r.ec = error::invalid_argument; // not modelled
    co_return r;
}

} // namespace colock::test
