// The quorum store's insides, shared by its two sources: quorum_store.cpp (acquire, extend,
// release, wake-ups: the rounds over the primaries) and quorum_status.cpp (status, the
// deployment's facts, errors and the checks of the primaries). Private to the library's sources.
//
// Each primary is a single_connection_store on the quorum's strand; every operation asks them all
// in parallel and decides by majority (quorum.hpp) as soon as the answers allow, or when the
// round's timeout leaves the rest unknown. Stragglers finish in the background: a late grant is
// kept (it is ours, renewed and released with the rest) or given back, a late release completes.
//
// Lifetimes: every background coroutine owns the store (shared_ptr) and its round's state, and
// copies the keys and token it sends; nothing refers to the caller's locals after the awaited
// call returns.
#pragma once

#include "common.hpp"
#include "lease_store.hpp"
#include "quorum.hpp"
#include "quorum_leases.hpp"
#include "single_connection_store.hpp"

#include "../detail/awaitable_tokens.hpp"
#include "../redis/engine.hpp"

#include <colock/error.hpp>
#include <colock/redis/connection.hpp>

#include <algorithm>
#include <memory>
#include <optional>
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

// How long a release waits for the last primaries once a majority answered.
inline constexpr milliseconds release_round_wait{1000};
// How long status waits for each primary's reading.
inline constexpr milliseconds status_read_timeout{1000};

// "<message>: <server text>", or the message alone.
std::string describe(error_code ec, std::string const& server_text);

// An error that asking again cannot mend (a refusal such as NOPERM, a reply of the wrong shape):
// reported as it is rather than as a missing quorum.
bool is_lasting(error_code ec, std::string const& server_text);

// What a round over the primaries has heard so far; the awaiting coroutine sleeps on `timer`
// until decided() or the round's timeout.
struct round_state {
    round_state(asio::strand<asio::any_io_executor> const& strand, std::size_t n)
        : timer(strand), answered(n, false) {}

    lock_timer timer;
    std::vector<bool> answered;
    std::size_t pending() const {
        return static_cast<std::size_t>(std::count(answered.begin(), answered.end(), false));
    }
    bool decided = false;
    void decide() {
        if (!decided) {
            decided = true;
            timer.cancel();
        }
    }
};

// Waits until the round is decided or `timeout` passed; false when the awaiting coroutine was
// cancelled first (only with `cancellable`).
asio::awaitable<bool> await_round(round_state& round, milliseconds timeout, bool cancellable);

class quorum_store;

// One primary's events, to the quorum: messages and reconnections as they are, server changes
// judged per lease first.
struct member_events final : lease_events {
    member_events(std::weak_ptr<quorum_store> q, std::size_t i) : quorum(std::move(q)), index(i) {}
    std::weak_ptr<quorum_store> quorum;
    std::size_t const index;
    void on_message(std::string const& channel, std::string const& payload) override;
    void on_reconnect() override;
    void on_server_change() override;
    void on_connection_close() noexcept override;
};

class quorum_store final : public lease_store, public std::enable_shared_from_this<quorum_store> {
public:
    quorum_store(std::span<redis::connection* const> primaries,
                 asio::strand<asio::any_io_executor> strand)
        : strand_(std::move(strand)), leases_(primaries.size()) {
        for (auto* conn : primaries) {
            auto const& engine = redis::detail::engine_of(*conn);
            members_.push_back({engine, make_single_connection_store(engine, strand_),
                                redis::detail::engine_endpoint_text(engine)});
        }
    }

    asio::strand<asio::any_io_executor> const& strand() const override { return strand_; }

    milliseconds safe_ttl(milliseconds ttl) const noexcept override {
        return quorum::validity(ttl, milliseconds(0));
    }

    // ------------------------------------------------------------------ acquire

    asio::awaitable<grant_result> grant(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, queueing queue,
                                        asio::cancellation_slot stop,
                                        replica_wait replicas) override;

    // ------------------------------------------------------------------ extend

    asio::awaitable<lease_reply> extend(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, std::int64_t fence) override;

    // ------------------------------------------------------------------ release

    asio::awaitable<lease_reply> release(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence) override;

    void release_in_background(lock_keys const& keys, std::string const& token, milliseconds claim,
                               std::int64_t last_fence, std::function<void()> retry) override;

    void give_back_in_background(lock_keys const& keys, std::string const& token,
                                 std::function<bool()> current) override {
        for (auto& m : members_)
            m.store->give_back_in_background(keys, token, current);
    }

    void leave_queue(lock_keys const& keys, milliseconds claim) override {
        for (auto& m : members_)
            m.store->leave_queue(keys, claim);
    }

    // ------------------------------------------------------------------ wake-ups

    asio::awaitable<std::pair<error_code, std::string>>
    subscribe(std::string const& channel) override;

    void unsubscribe(std::string const& channel) override {
        for (auto& m : members_)
            m.store->unsubscribe(channel);
    }

    void listen(std::weak_ptr<lease_events> events, std::string channel_prefix) override {
        events_ = std::move(events);
        for (std::size_t i = 0; i < members_.size(); ++i) {
            relays_.push_back(std::make_shared<member_events>(weak_from_this(), i));
            members_[i].store->listen(relays_.back(), channel_prefix);
        }
    }

    void stop_listening() override {
        for (auto& m : members_)
            m.store->stop_listening();
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
    void relay_connection_close() noexcept {
        if (auto e = events_.lock())
            e->on_connection_close();
    }

    // A primary was replaced (restarted, failed over): it no longer counts for the leases it
    // granted or confirmed before (its count of server changes moved). A lease left with fewer
    // than a majority is lost: its key's count moves, and the lock layer marks its guards lost.
    void member_replaced();

    // ------------------------------------------------------------------ status

    asio::awaitable<lock_reading> read(lock_keys const& keys) override;

    asio::awaitable<record_reading> read_record(std::string const& key) override;

    void write_record(std::string const& key,
                      std::vector<std::pair<std::string, std::string>> const& fields,
                      milliseconds ttl) override {
        for (auto& m : members_)
            m.store->write_record(key, fields, ttl);
    }

    asio::awaitable<forced_unlock_result> force_unlock(lock_keys const& keys,
                                                       std::string const& notify_prefix) override;

    // ------------------------------------------------------------------ facts

    bool is_connected() const noexcept override {
        std::size_t up = 0;
        for (auto const& m : members_)
            up += m.store->is_connected() ? 1 : 0;
        return up >= quorum::majority(members_.size());
    }

    std::string last_error_text() const override;

    // On the strand: moves when a lease on `keys` lost its majority to replaced primaries.
    std::uint64_t server_changes(lock_keys const& keys) const noexcept override {
        return leases_.changes(keys.key);
    }

    std::uint64_t reconnects() const noexcept override {
        std::uint64_t total = 0;
        for (auto const& m : members_)
            total += m.store->reconnects();
        return total;
    }
    bool logs(log_level level) const noexcept override { return members_[0].store->logs(level); }
    void log(log_level level, std::string_view line) const noexcept override {
        members_[0].store->log(level, line);
    }

private:
    // Connected once and not now: reconnecting (a connection never used yet is asked, which
    // connects it).
    bool is_down(std::size_t i) const {
        auto const& engine = members_[i].engine;
        return redis::detail::engine_ever_connected(engine) &&
               !redis::detail::engine_is_connected(engine);
    }

    struct member {
        redis::detail::shared_engine engine;
        std::shared_ptr<lease_store> store;
        std::string endpoint; // "host:port", for messages
    };

    // An acquisition's round: each primary's answer as it comes.
    struct grant_round : round_state {
        grant_round(asio::strand<asio::any_io_executor> const& s, std::size_t n, lock_keys const& k,
                    std::string const& t, milliseconds l, queueing q, replica_wait r)
            : round_state(s, n)
            , keys(k)
            , token(t)
            , ttl(l)
            , queue(q)
            , replicas(r)
            , stops(n)
            , results(n)
            , changes_at_start(n) {}
        lock_keys const keys;
        std::string const token;
        milliseconds const ttl;
        queueing const queue;
        replica_wait const replicas;
        std::vector<asio::cancellation_signal> stops;
        std::vector<grant_result> results;
        std::vector<std::uint64_t> changes_at_start;
        std::size_t granted = 0;
        bool stopped = false; // the caller's stop was emitted
        bool closed = false;  // decided and reported: late answers are handled on their own
        bool lease_made = false;
        bool superseded = false; // a newer round for the same key and token began
    };

    struct extend_round : round_state {
        extend_round(asio::strand<asio::any_io_executor> const& s, std::size_t n,
                     lock_keys const& k, std::string const& t, milliseconds l, std::int64_t f)
            : round_state(s, n), keys(k), token(t), ttl(l), fence(f), errors(n) {}
        lock_keys const keys;
        std::string const token;
        milliseconds const ttl;
        std::int64_t const fence;
        std::size_t confirmed = 0;
        std::size_t not_ours = 0;
        std::vector<std::pair<error_code, std::string>> errors; // per primary, when it failed
        bool closed = false;
    };

    struct release_round : round_state {
        release_round(asio::strand<asio::any_io_executor> const& s, std::size_t n,
                      lock_keys const& k, std::string const& t, milliseconds c, std::int64_t f)
            : round_state(s, n), keys(k), token(t), claim(c), last_fence(f), errors(n) {}
        lock_keys const keys;
        std::string const token;
        milliseconds const claim;
        std::int64_t const last_fence;
        std::size_t ours = 0;
        std::size_t not_ours = 0;
        std::size_t handed = 0;
        std::vector<std::pair<error_code, std::string>> errors;
    };

    struct subscribe_round : round_state {
        using round_state::round_state;
        std::size_t ok = 0;
        error_code first_ec;
        std::string first_text;
    };

    static asio::awaitable<void> ask_member(std::shared_ptr<quorum_store> self,
                                            std::shared_ptr<grant_round> round, std::size_t i);

    grant_result decide(std::shared_ptr<grant_round> const& round_ptr, lock_keys const& keys,
                        std::string const& token, clock_type::duration took);

    // Why a round had no majority: a lasting error of a primary as it is; connect failures of
    // primaries never reached as the first of them; otherwise no_quorum, naming each primary
    // that did not answer.
    std::pair<error_code, std::string> grant_error(grant_round const& round) const;

    template <class Round>
    std::pair<error_code, std::string> round_error(Round const& round) const {
        auto errors = round.errors;
        for (std::size_t i = 0; i < members_.size(); ++i)
            if (!round.answered[i] && !errors[i].first)
                errors[i] = {error::no_quorum, "no answer in time"};
        return summarise(errors);
    }

    std::pair<error_code, std::string>
    summarise(std::vector<std::pair<error_code, std::string>> const& errors) const;

    static asio::awaitable<void> extend_member(std::shared_ptr<quorum_store> self,
                                               std::shared_ptr<extend_round> round, std::size_t i);

    static asio::awaitable<void> release_member(std::shared_ptr<quorum_store> self,
                                                std::shared_ptr<release_round> round,
                                                std::size_t i);

    static asio::awaitable<void> subscribe_member(std::shared_ptr<quorum_store> self,
                                                  std::shared_ptr<subscribe_round> round,
                                                  std::size_t i, std::string channel);

    // Gives primary `i`'s grant of `round` back, free (not handed on: see release_source), in
    // the background, unless a newer acquisition for the same key and token supersedes it (the
    // lock layer asks again with the same token: a late give-back must not take back what the
    // new round grants). Its request follows the round's own on that primary's connection.
    void give_back(std::size_t i, std::shared_ptr<grant_round> const& round) {
        members_[i].store->give_back_in_background(round->keys, round->token,
                                                   [round] { return !round->superseded; });
    }

    // Marks the rounds before this one for the same key and token superseded.
    void supersede_earlier(std::shared_ptr<grant_round> const& round);

    // The first time two primaries turn out to be one server (the same run_id), every attempt
    // is refused: Redlock over it would count one server twice.
    std::optional<std::string> same_server_twice() const;

    asio::strand<asio::any_io_executor> const strand_;
    std::vector<member> members_;
    std::weak_ptr<lease_events> events_;
    std::vector<std::shared_ptr<member_events>> relays_;
    // On the strand:
    quorum_leases leases_;
    // The last acquisition round per key and token (key + '\n' + token), while it lives.
    std::unordered_map<std::string, std::weak_ptr<grant_round>> last_round_;
    std::minstd_rand rng_{std::random_device{}()};

    // A reading's state: its kind ('H', 'R', 'F'), fence, and holder (the token for 'H', the
    // locker for 'R', "-" after a forced unlock); none for a value that is no lock's.
    struct lock_state_words {
        char kind = 0;
        std::int64_t fence = 0;
        std::string holder;
    };
    static std::optional<lock_state_words> state_of(lock_reading const& r);
};

} // namespace colock::detail::redlock
