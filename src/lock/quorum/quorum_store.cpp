// The quorum store's face: the lease_store operations handed to the rounds, the status and the
// members, the events relayed from the primaries, and the checks of the primaries
// (quorum_store_impl.hpp says how the parts fit).
#include "lock/quorum/quorum_store.hpp"
#include "lock/quorum/quorum_store_impl.hpp"

#include <colock/error.hpp>

#include <boost/asio/dispatch.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <atomic>
#include <stdexcept>
#include <string_view>

namespace colock::detail {

namespace redlock {

asio::awaitable<grant_result> quorum_store::grant(lock_keys const& keys, std::string const& token,
                                                  milliseconds ttl, queueing queue,
                                                  asio::cancellation_slot stop,
                                                  replica_wait replicas) {
    if (auto refusal = members_->same_server_twice()) {
        grant_result r;
        r.ec = error::invalid_argument;
        r.server_text = std::move(*refusal);
        co_return r;
    }
    auto round = std::make_shared<grant_round>(members_->strand(), members_->size(), keys, token,
                                               ttl, queue, replicas);
    supersede_earlier(round);
    auto out = co_await run_grant(members_, leases_, std::move(round), stop, rng_);
    co_return std::move(out.result);
}

asio::awaitable<names_grant> quorum_store::grant_names(std::span<lock_keys const> keys,
                                                       names_request const& request,
                                                       asio::cancellation_slot stop) {
    if (auto refusal = members_->same_server_twice()) {
        names_grant r;
        r.result.ec = error::invalid_argument;
        r.result.server_text = std::move(*refusal);
        co_return r;
    }
    // Each primary takes every name or none in its own queues; a majority of primaries that
    // took every name holds the set, as for one name.
    auto const queue = request.queue ? queueing::when_held : queueing::never;
    names_attempt attempt{std::vector<lock_keys>(keys.begin(), keys.end()), request};
    auto round = std::make_shared<grant_round>(members_->strand(), members_->size(), keys.front(),
                                               request.token, request.ttl, queue, replica_wait{},
                                               std::move(attempt));
    supersede_earlier(round);
    co_return co_await run_grant(members_, leases_, std::move(round), stop, rng_);
}

asio::awaitable<lease_reply> quorum_store::release(lock_keys const& keys, std::string const& token,
                                                   milliseconds claim, std::int64_t last_fence,
                                                   std::optional<held_value> /*written*/) {
    // Each primary granted its own fence and stores its own: no value is known for all of them,
    // so each release takes the general path.
    leases_->forget(keys.key, token);
    co_return co_await run_release(members_, keys, token, claim, last_fence);
}

void quorum_store::release_in_background(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence,
                                         std::optional<held_value> /*written*/,
                                         std::function<void()> retry) {
    // From any thread: handed to every primary now. The first passing failure of any of them
    // runs `retry` (release() on all, each retrying until its deadline: a repeat where the
    // first went through answers "not ours" and changes nothing).
    auto retried = std::make_shared<std::atomic<bool>>(false);
    auto shared_retry = std::make_shared<std::function<void()>>(std::move(retry));
    for (std::size_t i = 0; i < members_->size(); ++i)
        members_->store(i).release_in_background(keys, token, claim, last_fence, std::nullopt,
                                                 [retried, shared_retry] {
                                                     if (!retried->exchange(true))
                                                         (*shared_retry)();
                                                 });
    asio::dispatch(members_->strand(), [self = shared_from_this(), key = keys.key, token] {
        self->leases_->forget(key, token);
    });
}

asio::awaitable<lease_reply>
quorum_store::release_names(std::span<lock_keys const> keys, std::string const& entry,
                            std::string const& token, bool leave,
                            std::span<std::int64_t const> last_fences) {
    leases_->forget(keys.front().key, token);
    // A named local, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    names_release names;
    names.keys.assign(keys.begin(), keys.end());
    names.entry = entry;
    names.leave = leave;
    names.last_fences.assign(last_fences.begin(), last_fences.end());
    co_return co_await run_release(members_, keys.front(), token, milliseconds(0), 0,
                                   std::move(names));
}

void quorum_store::release_names_in_background(std::span<lock_keys const> keys,
                                               std::string const& entry, std::string const& token,
                                               bool leave,
                                               std::span<std::int64_t const> last_fences,
                                               std::function<void()> retry) {
    // As release_in_background: handed to every primary now, retried once on the strand.
    auto retried = std::make_shared<std::atomic<bool>>(false);
    auto shared_retry = std::make_shared<std::function<void()>>(std::move(retry));
    for (std::size_t i = 0; i < members_->size(); ++i)
        members_->store(i).release_names_in_background(keys, entry, token, leave, last_fences,
                                                       [retried, shared_retry] {
                                                           if (!retried->exchange(true))
                                                               (*shared_retry)();
                                                       });
    asio::dispatch(members_->strand(), [self = shared_from_this(), key = keys.front().key, token] {
        self->leases_->forget(key, token);
    });
}

void quorum_store::listen(std::weak_ptr<channel_events> events, std::string channel_prefix) {
    events_ = std::move(events);
    for (std::size_t i = 0; i < members_->size(); ++i) {
        relays_.push_back(std::make_shared<member_events>(weak_from_this()));
        members_->store(i).listen(relays_.back(), channel_prefix);
    }
}

void quorum_store::member_replaced() {
    bool const lost_any = leases_->mark_replaced([this](std::size_t i, std::string const& key) {
        return members_->server_changes_for(i, key);
    });
    if (auto e = events_.lock(); e && lost_any)
        e->on_server_change();
}

void quorum_store::supersede_earlier(std::shared_ptr<grant_round> const& round) {
    std::erase_if(last_round_, [](auto const& e) { return e.second.expired(); });
    auto& last = last_round_[round->keys().key + '\n' + round->token()];
    if (auto earlier = last.lock())
        earlier->supersede();
    last = round;
}

void member_events::on_message(std::string const& channel, std::string const& payload) {
    if (auto q = quorum_.lock())
        q->relay_message(channel, payload);
}

void member_events::on_reconnect() {
    if (auto q = quorum_.lock())
        q->relay_reconnect();
}

void member_events::on_close() noexcept {
    if (auto q = quorum_.lock())
        q->relay_close();
}

void member_events::on_server_change() {
    if (auto q = quorum_.lock())
        q->member_replaced();
}

} // namespace redlock

void check_redlock_primaries(std::span<redis::connection* const> primaries) {
    auto refuse = [](std::string const& what) {
        throw boost::system::system_error(make_error_code(error::invalid_argument),
                                          "colock: " + what);
    };
    for (std::size_t i = 0; i < primaries.size(); ++i)
        if (primaries[i] == nullptr)
            refuse(fmt::format("Redlock primary {} is a null pointer", i + 1));
    std::vector<std::string> unknown_run_ids(primaries.size());
    try {
        quorum::check_primaries(unknown_run_ids);
    } catch (std::invalid_argument const& e) {
        refuse(std::string(e.what()).substr(std::string_view("colock: ").size()));
    }
    for (std::size_t i = 0; i < primaries.size(); ++i) {
        auto const& engine = redis::detail::engine_of(*primaries[i]);
        if (redis::detail::engine_shards_channels(engine))
            refuse(fmt::format("Redlock primary {} is a Redis Cluster connection; each primary "
                               "must be one server (or a Sentinel-resolved primary)",
                               i + 1));
        for (std::size_t j = 0; j < i; ++j) {
            if (primaries[j] == primaries[i])
                refuse(fmt::format("Redlock primaries {} and {} are the same connection", j + 1,
                                   i + 1));
            auto const endpoint = redis::detail::engine_endpoint_text(engine);
            if (endpoint ==
                redis::detail::engine_endpoint_text(redis::detail::engine_of(*primaries[j])))
                refuse(fmt::format("Redlock primaries {} and {} are the same server ({}); each "
                                   "must be an independent primary",
                                   j + 1, i + 1, endpoint));
        }
    }
}

std::shared_ptr<lease_store> make_quorum_store(std::span<redis::connection* const> primaries) {
    check_redlock_primaries(primaries);
    auto strand = boost::asio::make_strand(
        redis::detail::engine_executor(redis::detail::engine_of(*primaries[0])));
    return std::make_shared<redlock::quorum_store>(primaries, std::move(strand));
}

} // namespace colock::detail
