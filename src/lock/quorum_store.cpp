// The quorum store's rounds: acquire, extend, release and wake-ups over the primaries, and the
// leases it keeps count of (quorum_store_impl.hpp says how the parts fit).
#include "quorum_store_impl.hpp"

#include "errors.hpp"

#include <colock/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>

#include <fmt/format.h>

#include <atomic>

namespace colock::detail::redlock {

asio::awaitable<bool> await_round(round_state& round, milliseconds timeout, bool cancellable) {
    round.timer.expires_after(timeout);
    while (!round.decided) {
        error_code ec;
        if (cancellable)
            std::tie(ec) = co_await round.timer.async_wait(nothrow_awaitable);
        else
            std::tie(ec) = co_await round.timer.async_wait(uncancellable());
        if (!ec)
            break; // timed out: the rest is unknown
        if (!round.decided)
            co_return false;
    }
    co_return true;
}

asio::awaitable<grant_result> quorum_store::grant(lock_keys const& keys, std::string const& token,
                                                  milliseconds ttl, queueing queue,
                                                  asio::cancellation_slot stop,
                                                  replica_wait replicas) {
    if (auto refusal = same_server_twice()) {
        grant_result r;
        r.ec = error::invalid_argument;
        r.server_text = std::move(*refusal);
        co_return r;
    }
    auto const n = members_.size();
    auto round = std::make_shared<grant_round>(strand_, n, keys, token, ttl, queue, replicas);
    supersede_earlier(round);
    for (std::size_t i = 0; i < n; ++i)
        round->changes_at_start[i] = members_[i].store->server_changes(keys);
    if (stop.is_connected())
        stop.assign([round](asio::cancellation_type) {
            round->stopped = true;
            for (auto& s : round->stops)
                s.emit(asio::cancellation_type::total);
        });
    auto const started = clock_type::now();
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(strand_, ask_member(shared_from_this(), round, i), asio::detached);
    co_await await_round(*round, quorum::attempt_timeout(ttl), false);
    if (stop.is_connected())
        stop.clear();
    round->closed = true;
    co_return decide(round, keys, token, clock_type::now() - started);
}

asio::awaitable<lease_reply> quorum_store::extend(lock_keys const& keys, std::string const& token,
                                                  milliseconds ttl, std::int64_t fence) {
    auto const n = members_.size();
    auto round = std::make_shared<extend_round>(strand_, n, keys, token, ttl, fence);
    auto const started = clock_type::now();
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(strand_, extend_member(shared_from_this(), round, i), asio::detached);
    if (!co_await await_round(*round, quorum::attempt_timeout(ttl), true))
        co_return lease_reply{asio::error::operation_aborted, false};
    round->closed = true;
    auto const confirmed = round->confirmed;
    auto const elapsed = std::chrono::duration_cast<milliseconds>(clock_type::now() - started);
    if (quorum::extension_holds(confirmed, n, ttl, elapsed))
        co_return lease_reply{error_code{}, true};
    // Definitely lost when the primaries that said "not ours" leave no majority possible.
    if (round->not_ours > n - quorum::majority(n))
        co_return lease_reply{error_code{}, false};
    if (confirmed >= quorum::majority(n)) // confirmed, but too late to count on it
        co_return lease_reply{error::no_quorum, false};
    co_return lease_reply{round_error(*round).first, false};
}

asio::awaitable<lease_reply> quorum_store::release(lock_keys const& keys, std::string const& token,
                                                   milliseconds claim, std::int64_t last_fence) {
    leases_.forget(keys.key, token);
    auto const n = members_.size();
    auto round = std::make_shared<release_round>(strand_, n, keys, token, claim, last_fence);
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(strand_, release_member(shared_from_this(), round, i), asio::detached);
    // Each primary's release retries until release_timeout by itself. Wait for all; for a
    // majority that gave the lease back; or, after release_round_wait, for any majority's
    // answers, so that a primary that stalls or died does not hold up unlock().
    round->timer.expires_after(release_round_wait);
    while (!round->decided) {
        auto [ec] = co_await round->timer.async_wait(uncancellable());
        if (!ec) {
            if (round->ours + round->not_ours >= quorum::majority(n))
                break;
            round->timer.expires_at(clock_type::time_point::max());
        }
    }
    // Ours unless a majority said it was not (then the lease had been lost meanwhile); a
    // primary that never granted it says "not ours" too.
    auto const majority = quorum::majority(n);
    lease_reply r;
    r.ours = round->ours > 0 && round->not_ours < majority;
    r.handed = round->handed >= majority;
    if (round->ours + round->not_ours < majority) {
        r.ours = false;
        r.ec = round_error(*round).first;
    }
    co_return r;
}

void quorum_store::release_in_background(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence,
                                         std::function<void()> retry) {
    // From any thread: handed to every primary now. The first passing failure of any of them
    // runs `retry` (release() on all, each retrying until its deadline: a repeat where the
    // first went through answers "not ours" and changes nothing).
    auto retried = std::make_shared<std::atomic<bool>>(false);
    auto shared_retry = std::make_shared<std::function<void()>>(std::move(retry));
    for (auto& m : members_)
        m.store->release_in_background(keys, token, claim, last_fence, [retried, shared_retry] {
            if (!retried->exchange(true))
                (*shared_retry)();
        });
    asio::dispatch(strand_, [self = shared_from_this(), key = keys.key, token] {
        self->leases_.forget(key, token);
    });
}

asio::awaitable<std::pair<error_code, std::string>>
quorum_store::subscribe(std::string const& channel) {
    auto const n = members_.size();
    auto round = std::make_shared<subscribe_round>(strand_, n);
    for (std::size_t i = 0; i < n; ++i)
        asio::co_spawn(strand_, subscribe_member(shared_from_this(), round, i, channel),
                       asio::detached);
    // A wake-up from any primary is enough: done when a majority listens or all answered.
    round->timer.expires_at(clock_type::time_point::max());
    while (!round->decided)
        co_await round->timer.async_wait(uncancellable());
    if (round->ok > 0)
        co_return std::pair<error_code, std::string>{};
    co_return std::pair<error_code, std::string>{round->first_ec, round->first_text};
}

void quorum_store::member_replaced() {
    bool const lost_any = leases_.mark_replaced([this](std::size_t i, std::string const& key) {
        return redis::detail::engine_server_changes_for(members_[i].engine, key);
    });
    if (auto e = events_.lock(); e && lost_any)
        e->on_server_change();
}

asio::awaitable<void> quorum_store::ask_member(std::shared_ptr<quorum_store> self,
                                               std::shared_ptr<grant_round> round, std::size_t i) {
    if (round->closed || round->stopped) {
        // Decided (or stopped) before this primary was asked: nothing was sent.
        round->results[i].ec = asio::error::operation_aborted;
        round->answered[i] = true;
        co_return;
    }
    auto& m = self->members_[i];
    if (self->is_down(i)) {
        // Reconnecting: a request would wait in its queue and might run long after this
        // round; nothing is sent, so the round can decide on the others' answers now.
        round->results[i].ec = redis::error::connection_lost;
        round->results[i].server_text = "not connected (reconnecting)";
        round->answered[i] = true;
        if (quorum::round_decided(round->granted, round->pending(), self->members_.size()))
            round->decide();
        co_return;
    }
    auto r = co_await m.store->grant(round->keys, round->token, round->ttl, round->queue,
                                     round->stops[i].slot(), round->replicas);
    auto const changes = m.store->server_changes(round->keys);
    if (r.granted && changes != round->changes_at_start[i]) {
        // Granted by an instance that has been replaced since: it does not count, and the
        // new one may hold our token (the request may have been repeated there).
        r.granted = false;
        r.ec = redis::error::connection_lost;
        r.outcome_unknown = true;
    }
    if (round->closed) {
        // A straggler: joins the lease when it was made, else gives its grant back.
        if (r.granted && round->lease_made)
            self->leases_.count(round->keys.key, round->token, i, changes);
        else if (r.granted || r.outcome_unknown)
            self->give_back(i, round);
        co_return;
    }
    round->results[i] = std::move(r);
    round->answered[i] = true;
    if (round->results[i].granted)
        ++round->granted;
    if (quorum::round_decided(round->granted, round->pending(), self->members_.size()))
        round->decide();
}

grant_result quorum_store::decide(std::shared_ptr<grant_round> const& round_ptr,
                                  lock_keys const& keys, std::string const& token,
                                  clock_type::duration took) {
    auto& round = *round_ptr;
    auto const n = members_.size();
    auto const elapsed = std::chrono::duration_cast<milliseconds>(took);
    std::vector<quorum::grant_vote> votes(n);
    bool others_queued = false;
    for (std::size_t i = 0; i < n; ++i) {
        auto const& r = round.results[i];
        auto& v = votes[i];
        if (!round.answered[i] || (r.ec && r.outcome_unknown))
            v.what = quorum::grant_vote::kind::unknown;
        else if (r.ec)
            v.what = quorum::grant_vote::kind::refused;
        else if (r.granted)
            v = {quorum::grant_vote::kind::granted, r.fence, milliseconds(0)};
        else
            v = {quorum::grant_vote::kind::held, 0, r.holder_ttl};
        others_queued = others_queued || (!r.ec && round.answered[i] && r.others_queued);
    }
    auto const d = quorum::decide_grant(votes, round.ttl, elapsed);
    grant_result result;
    if (d.granted) {
        round.lease_made = true;
        std::vector<std::optional<std::uint64_t>> counted(n);
        for (std::size_t i = 0; i < n; ++i)
            if (votes[i].what == quorum::grant_vote::kind::granted)
                counted[i] = round.changes_at_start[i];
        leases_.record(keys.key, token, std::move(counted));
        result.granted = true;
        result.fence = d.fence;
        result.others_queued = others_queued;
        return result;
    }
    // Not ours: give back every grant, and every attempt that may have been applied (its
    // release follows it on that primary's connection, so it runs after it). A release
    // hands the primary to the first process queued there, which helps a split converge.
    for (auto const i : d.release)
        give_back(i, round_ptr);
    result.outcome_unknown = !d.release.empty();
    std::size_t held = 0;
    for (auto const& v : votes)
        held += v.what == quorum::grant_vote::kind::held ? 1 : 0;
    if (round.stopped && held < quorum::majority(n)) {
        result.ec = asio::error::operation_aborted;
        return result;
    }
    if (d.retry_after.count() > 0 || held >= quorum::majority(n)) {
        // Held elsewhere: no error; the wait is until a majority may lapse.
        result.holder_ttl = d.retry_after;
        result.others_queued = others_queued;
        return result;
    }
    if (held > 0 && held + round.granted >= quorum::majority(n) &&
        round.granted < quorum::majority(n)) {
        // Split with other waiters (each got some primaries, none a majority): all give back
        // and ask again after a random pause, so that one of them comes first.
        auto const scale = std::max<std::int64_t>(2, 2 * elapsed.count());
        result.holder_ttl =
            milliseconds(std::uniform_int_distribution<std::int64_t>(1, scale)(rng_));
        result.others_queued = others_queued;
        return result;
    }
    if (round.granted >= quorum::majority(n)) {
        // A majority granted, but the attempt took too long for the lease to be safe.
        result.ec = error::no_quorum;
        result.server_text = fmt::format(
            "a majority of the Redlock primaries granted the lock, but the attempt took {} ms "
            "of its {} ms ttl, which leaves no validity after {} ms of clock drift",
            elapsed.count(), round.ttl.count(), quorum::clock_drift(round.ttl).count());
        return result;
    }
    auto [ec, text] = grant_error(round);
    result.ec = ec;
    result.server_text = std::move(text);
    return result;
}

asio::awaitable<void> quorum_store::extend_member(std::shared_ptr<quorum_store> self,
                                                  std::shared_ptr<extend_round> round,
                                                  std::size_t i) {
    auto& m = self->members_[i];
    if (self->is_down(i)) {
        round->answered[i] = true;
        round->errors[i] = {redis::error::connection_lost, "not connected (reconnecting)"};
        if (quorum::round_decided(round->confirmed, round->pending(), self->members_.size()))
            round->decide();
        co_return;
    }
    auto const before = m.store->server_changes(round->keys);
    auto const r = co_await m.store->extend(round->keys, round->token, round->ttl, round->fence);
    auto const after = m.store->server_changes(round->keys);
    // A confirmation counts from an instance that granted or confirmed this lease before,
    // and was not replaced meanwhile; a late one still keeps the primary counted.
    bool const counts = !r.ec && r.ours && before == after &&
                        self->leases_.confirm(round->keys.key, round->token, i, after);
    if (round->closed)
        co_return;
    round->answered[i] = true;
    if (r.ec)
        round->errors[i] = {r.ec, std::string()};
    else if (counts)
        ++round->confirmed;
    else
        ++round->not_ours;
    if (quorum::round_decided(round->confirmed, round->pending(), self->members_.size()))
        round->decide();
}

asio::awaitable<void> quorum_store::release_member(std::shared_ptr<quorum_store> self,
                                                   std::shared_ptr<release_round> round,
                                                   std::size_t i) {
    // Sent to a primary that is down too (it may hold our token when it is back), but not
    // waited for.
    bool const down = self->is_down(i);
    if (down) {
        round->answered[i] = true;
        round->errors[i] = {redis::error::connection_lost, "not connected (reconnecting)"};
        if (round->pending() == 0)
            round->decide();
    }
    auto const r = co_await self->members_[i].store->release(round->keys, round->token,
                                                             round->claim, round->last_fence);
    if (down)
        co_return;
    round->answered[i] = true;
    if (r.ec)
        round->errors[i] = {r.ec, std::string()};
    else if (r.ours)
        ++round->ours;
    else
        ++round->not_ours;
    round->handed += !r.ec && r.handed ? 1 : 0;
    if (round->pending() == 0 || round->ours >= quorum::majority(self->members_.size()))
        round->decide();
}

asio::awaitable<void> quorum_store::subscribe_member(std::shared_ptr<quorum_store> self,
                                                     std::shared_ptr<subscribe_round> round,
                                                     std::size_t i, std::string channel) {
    auto const [ec, text] = co_await self->members_[i].store->subscribe(channel);
    round->answered[i] = true;
    if (!ec) {
        ++round->ok;
    } else if (!round->first_ec) {
        round->first_ec = ec;
        round->first_text = text;
    }
    if (round->pending() == 0 || round->ok >= quorum::majority(self->members_.size()))
        round->decide();
}

void quorum_store::supersede_earlier(std::shared_ptr<grant_round> const& round) {
    std::erase_if(last_round_, [](auto const& e) { return e.second.expired(); });
    auto& last = last_round_[round->keys.key + '\n' + round->token];
    if (auto earlier = last.lock())
        earlier->superseded = true;
    last = round;
}

void member_events::on_message(std::string const& channel, std::string const& payload) {
    if (auto q = quorum.lock())
        q->relay_message(channel, payload);
}

void member_events::on_reconnect() {
    if (auto q = quorum.lock())
        q->relay_reconnect();
}

void member_events::on_connection_close() noexcept {
    if (auto q = quorum.lock())
        q->relay_connection_close();
}

void member_events::on_server_change() {
    if (auto q = quorum.lock())
        q->member_replaced();
}

} // namespace colock::detail::redlock
