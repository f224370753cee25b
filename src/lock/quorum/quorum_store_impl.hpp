// The quorum store: the lease store over N independent primaries (Redlock), private to the
// library's sources. It is the face that composes the parts:
//
//   quorum_members   the primaries: one single_connection_store each, on the quorum's strand
//   quorum_grant     an acquisition's round and its decision (quorum.hpp decides the majority)
//   quorum_rounds    the extension, release and subscription rounds
//   quorum_leases    which primaries count for each lease made, and the leases lost to
//                    replaced primaries
//   quorum_status    status readings and forced unlocks over the primaries
//   quorum_election  an election's proclaim and read over the primaries
//
// Every operation asks the primaries in parallel and decides by majority as soon as the answers
// allow, or when the round's timeout leaves the rest unknown. Stragglers finish in the
// background: a late grant is kept (it is ours, renewed and released with the rest) or given
// back, a late release completes.
//
// Lifetimes: every background coroutine owns the members, the leases it counts in and its
// round's state (shared_ptr), and copies the keys and token it sends; nothing refers to the
// caller's locals after the awaited call returns.
#pragma once

#include "lock/quorum/quorum.hpp"
#include "lock/quorum/quorum_election.hpp"
#include "lock/quorum/quorum_grant.hpp"
#include "lock/quorum/quorum_leases.hpp"
#include "lock/quorum/quorum_members.hpp"
#include "lock/quorum/quorum_rounds.hpp"
#include "lock/quorum/quorum_status.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/redis/connection.hpp>

#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace colock::detail::redlock {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

class quorum_store;

// One primary's events, to the quorum: messages and reconnections as they are, server changes
// judged per lease first.
class member_events final : public channel_events {
public:
    explicit member_events(std::weak_ptr<quorum_store> quorum) : quorum_(std::move(quorum)) {}
    void on_message(std::string const& channel, std::string const& payload) override;
    void on_reconnect() override;
    void on_server_change() override;
    void on_close() noexcept override;

private:
    std::weak_ptr<quorum_store> quorum_;
};

class quorum_store final : public lease_store, public std::enable_shared_from_this<quorum_store> {
public:
    quorum_store(std::span<redis::connection* const> primaries,
                 asio::strand<asio::any_io_executor> strand)
        : members_(std::make_shared<quorum_members const>(primaries, std::move(strand)))
        , leases_(std::make_shared<quorum_leases>(primaries.size()))
        , status_(members_) {}

    asio::strand<asio::any_io_executor> const& strand() const override {
        return members_->strand();
    }

    milliseconds safe_ttl(milliseconds ttl) const noexcept override {
        return quorum::validity(ttl, milliseconds(0));
    }

    // ------------------------------------------------------------------ acquire

    asio::awaitable<grant_result> grant(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, queueing queue,
                                        asio::cancellation_slot stop,
                                        replica_wait replicas) override;

    asio::awaitable<names_grant> grant_names(std::span<lock_keys const> keys,
                                             names_request const& request,
                                             asio::cancellation_slot stop) override;

    // ------------------------------------------------------------------ extend

    asio::awaitable<lease_reply> extend(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, std::int64_t fence,
                                        std::optional<held_value> /*renewal*/) override {
        // Each primary's value is its own: no batches (each primary's renewal goes alone).
        return run_extend(members_, leases_, keys, token, ttl, fence);
    }

    asio::awaitable<lease_reply> extend_names(std::span<lock_keys const> keys,
                                              std::string const& token, milliseconds ttl) override {
        return run_extend(members_, leases_, keys.front(), token, ttl, 0,
                          std::vector<lock_keys>(keys.begin(), keys.end()));
    }

    // ------------------------------------------------------------------ release

    asio::awaitable<lease_reply> release(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence,
                                         std::optional<held_value> written) override;

    void release_in_background(lock_keys const& keys, std::string const& token, milliseconds claim,
                               std::int64_t last_fence, std::optional<held_value> written,
                               std::function<void()> retry) override;

    asio::awaitable<lease_reply> release_names(std::span<lock_keys const> keys,
                                               std::string const& entry, std::string const& token,
                                               bool leave,
                                               std::span<std::int64_t const> last_fences) override;
    void release_names_in_background(std::span<lock_keys const> keys, std::string const& entry,
                                     std::string const& token, bool leave,
                                     std::span<std::int64_t const> last_fences,
                                     std::function<void()> retry) override;

    void give_back_in_background(lock_keys const& keys, std::string const& token,
                                 std::function<bool()> current) override {
        for (std::size_t i = 0; i < members_->size(); ++i)
            members_->store(i).give_back_in_background(keys, token, current);
    }

    void leave_queue(lock_keys const& keys, milliseconds claim) override {
        for (std::size_t i = 0; i < members_->size(); ++i)
            members_->store(i).leave_queue(keys, claim);
    }

    // ------------------------------------------------------------------ wake-ups

    asio::awaitable<std::pair<error_code, std::string>>
    subscribe(std::string const& channel) override {
        return run_subscribe(members_, channel);
    }

    void unsubscribe(std::string const& channel) override {
        for (std::size_t i = 0; i < members_->size(); ++i)
            members_->store(i).unsubscribe(channel);
    }

    void listen(std::weak_ptr<channel_events> events, std::string channel_prefix) override;

    void stop_listening() override {
        for (std::size_t i = 0; i < members_->size(); ++i)
            members_->store(i).stop_listening();
    }

    void relay_message(std::string const& channel, std::string const& payload) {
        if (auto e = events_.lock())
            e->on_message(channel, payload);
    }
    void relay_reconnect() {
        if (auto e = events_.lock())
            e->on_reconnect();
    }
    // One primary's connection is closed by its user: the lock layer gives back every lease,
    // on all primaries (a lease needs a majority, and the user is shutting down).
    void relay_close() noexcept {
        if (auto e = events_.lock())
            e->on_close();
    }

    // A primary was replaced (restarted, failed over): it no longer counts for the leases it
    // granted or confirmed before (its count of server changes moved). A lease left with fewer
    // than a majority is lost: its key's count moves, and the lock layer marks its guards lost.
    void member_replaced();

    // ------------------------------------------------------------------ status

    asio::awaitable<lock_reading> read(lock_keys const& keys) override {
        return status_.read(keys);
    }

    asio::awaitable<record_reading> read_record(std::string const& key) override {
        return status_.read_record(key);
    }

    void write_record(std::string const& key,
                      std::vector<std::pair<std::string, std::string>> const& fields,
                      milliseconds ttl) override {
        for (std::size_t i = 0; i < members_->size(); ++i)
            members_->store(i).write_record(key, fields, ttl);
    }

    asio::awaitable<forced_unlock_result> force_unlock(lock_keys const& keys,
                                                       std::string const& notify_prefix) override {
        return status_.force_unlock(keys, notify_prefix);
    }

    // ------------------------------------------------------------------ election

    asio::awaitable<proclaim_result> proclaim(lock_keys const& keys,
                                              proclaim_request const& request) override {
        return run_proclaim(members_, keys, request);
    }

    asio::awaitable<election_reading> read_election(lock_keys const& keys) override {
        return run_read_election(members_, keys);
    }

    std::size_t majority() const noexcept override { return quorum::majority(members_->size()); }

    // ------------------------------------------------------------------ facts

    // Permits counted on each primary apart do not bound the holders by a majority of them:
    // two majorities of grants can together admit more holders than the capacity.
    std::string refusal_of(holding_kind kind) const override {
        if (kind != holding_kind::permits)
            return {};
        return fmt::format("a locker over {} independent primaries (Redlock) cannot hold one: its "
                           "holdings would be counted on each primary apart, and a majority of "
                           "them does not bound the holders; use a locker over one connection "
                           "(one server, Sentinel or Cluster)",
                           members_->size());
    }

    bool is_connected() const noexcept override { return members_->is_connected(); }

    std::string last_error_text() const override { return members_->last_error_text(); }

    // On the strand: moves when a lease on `keys` lost its majority to replaced primaries.
    std::uint64_t server_changes(lock_keys const& keys) const noexcept override {
        return leases_->changes(keys.key);
    }

    std::uint64_t reconnects() const noexcept override { return members_->reconnects(); }
    bool logs(log_level level) const noexcept override { return members_->store(0).logs(level); }
    void log(log_level level, std::string_view line) const noexcept override {
        members_->store(0).log(level, line);
    }

private:
    // Marks the rounds before `round` for the same key and token superseded.
    void supersede_earlier(std::shared_ptr<grant_round> const& round);

    std::shared_ptr<quorum_members const> const members_;
    std::shared_ptr<quorum_leases> const leases_; // on the strand
    quorum_status const status_;
    std::weak_ptr<channel_events> events_;
    std::vector<std::shared_ptr<member_events>> relays_;
    // On the strand: the last acquisition round per key and token (key + '\n' + token), while
    // it lives.
    std::unordered_map<std::string, std::weak_ptr<grant_round>> last_round_;
    std::minstd_rand rng_{std::random_device{}()};
};

} // namespace colock::detail::redlock
