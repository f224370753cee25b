// The lease store over N independent primaries (Redlock). Each primary is a
// single_connection_store on the quorum's strand; every operation asks them all in parallel and
// decides by majority (quorum.hpp) as soon as the answers allow, or when the round's timeout
// leaves the rest unknown. Stragglers finish in the background: a late grant is kept (it is ours,
// renewed and released with the rest) or given back, a late release completes.
//
// Lifetimes: every background coroutine owns the store (shared_ptr) and its round's state, and
// copies the keys and token it sends; nothing refers to the caller's locals after the awaited
// call returns.
#include "quorum_store.hpp"

#include "errors.hpp"
#include "quorum.hpp"
#include "single_connection_store.hpp"

#include <colock/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <variant>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

using namespace asio::experimental::awaitable_operators;

// How long a release waits for the last primaries once a majority answered.
constexpr milliseconds release_round_wait{1000};
// How long status waits for each primary's reading.
constexpr milliseconds status_read_timeout{1000};

auto uncancellable() {
    return asio::bind_cancellation_slot(asio::cancellation_slot(),
                                        asio::as_tuple(asio::use_awaitable));
}

std::string describe(error_code ec, std::string const& server_text) {
    if (server_text.empty())
        return ec.message();
    return fmt::format("{}: {}", ec.message(), server_text);
}

// An error that asking again cannot mend (a refusal such as NOPERM, a reply of the wrong shape):
// reported as it is rather than as a missing quorum.
bool is_lasting(error_code ec, std::string const& server_text) {
    return ec && ec != asio::error::operation_aborted && !is_transient(ec, server_text) &&
           !is_connect_failure(ec);
}

// What a round over the primaries has heard so far; the awaiting coroutine sleeps on `timer`
// until decided() or the round's timeout.
struct round_state {
    round_state(asio::strand<asio::any_io_executor> const& strand, std::size_t n)
        : timer(strand), answered(n, false) {}

    asio::steady_timer timer;
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
asio::awaitable<bool> await_round(round_state& round, milliseconds timeout, bool cancellable) {
    round.timer.expires_after(timeout);
    while (!round.decided) {
        error_code ec;
        if (cancellable)
            std::tie(ec) = co_await round.timer.async_wait(asio::as_tuple(asio::use_awaitable));
        else
            std::tie(ec) = co_await round.timer.async_wait(uncancellable());
        if (!ec)
            break; // timed out: the rest is unknown
        if (!round.decided)
            co_return false;
    }
    co_return true;
}

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
};

struct lease_track {
    // Per primary: its count of server changes when it granted or last confirmed the lease;
    // nothing while it never did.
    std::vector<std::optional<std::uint64_t>> counted;
    bool lost = false; // fell below a majority (reported once)
};

class quorum_store final : public lease_store, public std::enable_shared_from_this<quorum_store> {
public:
    quorum_store(std::span<redis::connection* const> primaries,
                 asio::strand<asio::any_io_executor> strand)
        : strand_(std::move(strand)) {
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
                                        replica_wait replicas) override {
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

    // ------------------------------------------------------------------ extend

    asio::awaitable<lease_reply> extend(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, std::int64_t fence) override {
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

    // ------------------------------------------------------------------ release

    asio::awaitable<lease_reply> release(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence) override {
        forget_lease(keys.key, token);
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

    void release_in_background(lock_keys const& keys, std::string const& token, milliseconds claim,
                               std::int64_t last_fence, std::function<void()> retry) override {
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
            self->forget_lease(key, token);
        });
    }

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
    subscribe(std::string const& channel) override {
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

    // A primary was replaced (restarted, failed over): it no longer counts for the leases it
    // granted or confirmed before (its count of server changes moved). A lease left with fewer
    // than a majority is lost: its key's count moves, and the lock layer marks its guards lost.
    void member_replaced() {
        bool lost_any = false;
        for (auto& [key, track] : tracks_) {
            for (auto& [token, lease] : track.leases) {
                if (lease.lost || counting(key, lease) >= quorum::majority(members_.size()))
                    continue;
                lease.lost = true;
                ++track.changes;
                lost_any = true;
            }
        }
        if (auto e = events_.lock(); e && lost_any)
            e->on_server_change();
    }

    // The primaries that still count for `lease`: those whose instance granted or confirmed it.
    std::size_t counting(std::string const& key, lease_track const& lease) const;

    // ------------------------------------------------------------------ status

    asio::awaitable<lock_reading> read(lock_keys const& keys) override {
        // One after the other, each bounded: status is not a hot path, and a primary that is
        // down must not hold it up for longer than status_read_timeout.
        std::vector<lock_reading> readings;
        for (auto& m : members_) {
            asio::steady_timer timeout(strand_);
            timeout.expires_after(status_read_timeout);
            auto answer = co_await (m.store->read(keys) || timeout.async_wait(asio::use_awaitable));
            if (answer.index() == 0) {
                readings.push_back(std::get<0>(std::move(answer)));
            } else {
                lock_reading late;
                late.ec = error::no_quorum;
                late.server_text = fmt::format("primary {}: no answer within {} ms", m.endpoint,
                                               status_read_timeout.count());
                readings.push_back(std::move(late));
            }
        }
        // Held when a majority holds it for the same token; the reading of one of them.
        auto const majority = quorum::majority(members_.size());
        std::size_t answered = 0;
        std::int64_t queued = 0;
        for (auto const& r : readings)
            if (!r.ec) {
                ++answered;
                queued = std::max(queued, r.queued);
            }
        for (auto const& r : readings) {
            auto const token = holder_token(r);
            if (r.ec || token.empty())
                continue;
            auto const same = std::count_if(readings.begin(), readings.end(), [&](auto const& o) {
                return !o.ec && holder_token(o) == token;
            });
            if (static_cast<std::size_t>(same) >= majority) {
                lock_reading held = r;
                held.queued = queued;
                co_return held;
            }
        }
        lock_reading free;
        if (answered < majority) {
            auto const first = std::find_if(readings.begin(), readings.end(),
                                            [](auto const& r) { return r.ec.failed(); });
            free.ec = is_lasting(first->ec, first->server_text) ? first->ec
                                                                : error_code(error::no_quorum);
            free.server_text = first->server_text;
        }
        free.queued = queued;
        co_return free;
    }

    asio::awaitable<record_reading> read_record(std::string const& key) override {
        record_reading first;
        for (std::size_t i = 0; i < members_.size(); ++i) {
            auto r = co_await members_[i].store->read_record(key);
            if (!r.ec && !r.fields.empty())
                co_return r;
            if (i == 0)
                first = std::move(r);
        }
        co_return first;
    }

    void write_record(std::string const& key,
                      std::vector<std::pair<std::string, std::string>> const& fields,
                      milliseconds ttl) override {
        for (auto& m : members_)
            m.store->write_record(key, fields, ttl);
    }

    asio::awaitable<forced_unlock_result> force_unlock(lock_keys const& keys,
                                                       std::string const& notify_prefix) override {
        forced_unlock_result result;
        std::size_t failed = 0;
        for (auto& m : members_) {
            auto r = co_await m.store->force_unlock(keys, notify_prefix);
            if (r.ec) {
                if (++failed == 1) {
                    result.ec = r.ec;
                    result.server_text =
                        fmt::format("primary {}: {}", m.endpoint, describe(r.ec, r.server_text));
                }
            } else if (r.ended && !result.ended) {
                result.ended = true;
                result.owner = r.owner;
                result.token = r.token;
            }
        }
        // Ended wherever it could be: a majority answering is enough for the lease to be over.
        if (failed <= members_.size() - quorum::majority(members_.size())) {
            result.ec = {};
            result.server_text.clear();
        }
        co_return result;
    }

    // ------------------------------------------------------------------ facts

    bool is_connected() const noexcept override {
        std::size_t up = 0;
        for (auto const& m : members_)
            up += m.store->is_connected() ? 1 : 0;
        return up >= quorum::majority(members_.size());
    }

    std::string last_error_text() const override {
        std::string text;
        for (auto const& m : members_) {
            auto const why = m.store->last_error_text();
            if (why.empty())
                continue;
            if (!text.empty())
                text += "; ";
            text += fmt::format("primary {}: {}", m.endpoint, why);
        }
        return text;
    }

    // On the strand: moves when a lease on `keys` lost its majority to replaced primaries.
    std::uint64_t server_changes(lock_keys const& keys) const noexcept override {
        auto const it = tracks_.find(keys.key);
        return it == tracks_.end() ? 0 : it->second.changes;
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

    // The leases this store granted and still renews, per lock key: which primaries count for
    // each (their server-change count when they granted or last confirmed it), and how often a
    // lease on the key lost its majority to replaced primaries (server_changes()).
    struct key_track {
        std::uint64_t changes = 0;
        std::unordered_map<std::string, lease_track> leases;
    };

    static asio::awaitable<void> ask_member(std::shared_ptr<quorum_store> self,
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
                self->count_member(round->keys.key, round->token, i, changes);
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

    grant_result decide(std::shared_ptr<grant_round> const& round_ptr, lock_keys const& keys,
                        std::string const& token, clock_type::duration took) {
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
            auto& lease = tracks_[keys.key].leases[token];
            lease.counted.assign(n, std::nullopt);
            lease.lost = false;
            for (std::size_t i = 0; i < n; ++i)
                if (votes[i].what == quorum::grant_vote::kind::granted)
                    lease.counted[i] = round.changes_at_start[i];
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

    // Why a round had no majority: a lasting error of a primary as it is; connect failures of
    // primaries never reached as the first of them; otherwise no_quorum, naming each primary
    // that did not answer.
    std::pair<error_code, std::string> grant_error(grant_round const& round) const {
        std::vector<std::pair<error_code, std::string>> errors(members_.size());
        for (std::size_t i = 0; i < members_.size(); ++i) {
            if (!round.answered[i])
                errors[i] = {error::no_quorum,
                             fmt::format("no answer within {} ms",
                                         quorum::attempt_timeout(round.ttl).count())};
            else if (round.results[i].ec)
                errors[i] = {round.results[i].ec, round.results[i].server_text};
        }
        return summarise(errors);
    }

    template <class Round>
    std::pair<error_code, std::string> round_error(Round const& round) const {
        auto errors = round.errors;
        for (std::size_t i = 0; i < members_.size(); ++i)
            if (!round.answered[i] && !errors[i].first)
                errors[i] = {error::no_quorum, "no answer in time"};
        return summarise(errors);
    }

    std::pair<error_code, std::string>
    summarise(std::vector<std::pair<error_code, std::string>> const& errors) const {
        std::string text;
        error_code lasting;
        std::string lasting_text;
        bool all_connect_failures = true;
        error_code first_connect_failure;
        for (std::size_t i = 0; i < members_.size(); ++i) {
            auto const& [ec, server_text] = errors[i];
            if (!ec || ec == asio::error::operation_aborted)
                continue;
            auto const part = ec == error::no_quorum
                                  ? fmt::format("primary {}: {}", members_[i].endpoint, server_text)
                                  : fmt::format("primary {}: {}", members_[i].endpoint,
                                                describe(ec, server_text));
            text += text.empty() ? part : "; " + part;
            if (!lasting && is_lasting(ec, server_text)) {
                lasting = ec;
                lasting_text = part;
            }
            if (is_connect_failure(ec)) {
                if (!first_connect_failure)
                    first_connect_failure = ec;
            } else {
                all_connect_failures = false;
            }
        }
        if (lasting)
            return {lasting, lasting_text};
        if (first_connect_failure && all_connect_failures)
            return {first_connect_failure, text};
        return {error::no_quorum,
                fmt::format("fewer than {} of {} Redlock primaries answered: {}",
                            quorum::majority(members_.size()), members_.size(), text)};
    }

    static asio::awaitable<void> extend_member(std::shared_ptr<quorum_store> self,
                                               std::shared_ptr<extend_round> round, std::size_t i) {
        auto& m = self->members_[i];
        if (self->is_down(i)) {
            round->answered[i] = true;
            round->errors[i] = {redis::error::connection_lost, "not connected (reconnecting)"};
            if (quorum::round_decided(round->confirmed, round->pending(), self->members_.size()))
                round->decide();
            co_return;
        }
        auto const before = m.store->server_changes(round->keys);
        auto const r =
            co_await m.store->extend(round->keys, round->token, round->ttl, round->fence);
        auto const after = m.store->server_changes(round->keys);
        // A confirmation counts from an instance that granted or confirmed this lease before,
        // and was not replaced meanwhile; a late one still keeps the primary counted.
        bool const counts = !r.ec && r.ours && before == after &&
                            self->confirm_member(round->keys.key, round->token, i, after);
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

    static asio::awaitable<void> release_member(std::shared_ptr<quorum_store> self,
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

    static asio::awaitable<void> subscribe_member(std::shared_ptr<quorum_store> self,
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

    // Gives primary `i`'s grant of `round` back, free (not handed on: see release_source), in
    // the background, unless a newer acquisition for the same key and token supersedes it (the
    // lock layer asks again with the same token: a late give-back must not take back what the
    // new round grants). Its request follows the round's own on that primary's connection.
    void give_back(std::size_t i, std::shared_ptr<grant_round> const& round) {
        members_[i].store->give_back_in_background(round->keys, round->token,
                                                   [round] { return !round->superseded; });
    }

    // Marks the rounds before this one for the same key and token superseded.
    void supersede_earlier(std::shared_ptr<grant_round> const& round) {
        std::erase_if(last_round_, [](auto const& e) { return e.second.expired(); });
        auto& last = last_round_[round->keys.key + '\n' + round->token];
        if (auto earlier = last.lock())
            earlier->superseded = true;
        last = round;
    }

    // The first time two primaries turn out to be one server (the same run_id), every attempt
    // is refused: Redlock over it would count one server twice.
    std::optional<std::string> same_server_twice() const {
        std::vector<std::string> run_ids;
        for (auto const& m : members_)
            run_ids.push_back(redis::detail::engine_run_id(m.engine));
        try {
            quorum::check_primaries(run_ids);
        } catch (std::invalid_argument const& e) {
            return std::string(e.what());
        }
        return std::nullopt;
    }

    void count_member(std::string const& key, std::string const& token, std::size_t i,
                      std::uint64_t changes) {
        auto const t = tracks_.find(key);
        if (t == tracks_.end())
            return;
        auto const l = t->second.leases.find(token);
        if (l != t->second.leases.end())
            l->second.counted[i] = changes;
    }

    // Whether primary `i`'s confirmation of the lease counts: it granted or confirmed it on the
    // same instance, or never counted for it before (a late grant). A lease this store does not
    // track (granted before a restart of the process? no: forgotten on release) counts as is.
    bool confirm_member(std::string const& key, std::string const& token, std::size_t i,
                        std::uint64_t changes) {
        auto const t = tracks_.find(key);
        if (t == tracks_.end())
            return true;
        auto const l = t->second.leases.find(token);
        if (l == t->second.leases.end())
            return true;
        auto& counted = l->second.counted[i];
        if (counted && *counted != changes)
            return false; // replaced since it granted: it no longer counts
        counted = changes;
        return true;
    }

    void forget_lease(std::string const& key, std::string const& token) {
        auto const t = tracks_.find(key);
        if (t == tracks_.end())
            return;
        t->second.leases.erase(token);
        if (t->second.leases.empty())
            tracks_.erase(t);
    }

    asio::strand<asio::any_io_executor> const strand_;
    std::vector<member> members_;
    std::weak_ptr<lease_events> events_;
    std::vector<std::shared_ptr<member_events>> relays_;
    // On the strand:
    std::unordered_map<std::string, key_track> tracks_;
    // The last acquisition round per key and token (key + '\n' + token), while it lives.
    std::unordered_map<std::string, std::weak_ptr<grant_round>> last_round_;
    std::minstd_rand rng_{std::random_device{}()};

    static std::string holder_token(lock_reading const& r) {
        // "H <fence> <owner> <token> <since> <queued>"
        if (!r.value.starts_with("H "))
            return {};
        std::size_t pos = 0;
        for (int field = 0; field < 3 && pos != std::string::npos; ++field)
            pos = r.value.find(' ', pos + 1);
        if (pos == std::string::npos)
            return {};
        auto const end = r.value.find(' ', pos + 1);
        return r.value.substr(pos + 1, end == std::string::npos ? end : end - pos - 1);
    }
};

std::size_t quorum_store::counting(std::string const& key, lease_track const& lease) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < members_.size(); ++i)
        if (lease.counted[i] &&
            *lease.counted[i] == redis::detail::engine_server_changes_for(members_[i].engine, key))
            ++n;
    return n;
}

void member_events::on_message(std::string const& channel, std::string const& payload) {
    if (auto q = quorum.lock())
        q->relay_message(channel, payload);
}

void member_events::on_reconnect() {
    if (auto q = quorum.lock())
        q->relay_reconnect();
}

void member_events::on_server_change() {
    if (auto q = quorum.lock())
        q->member_replaced();
}

} // namespace

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
    auto strand =
        asio::make_strand(redis::detail::engine_executor(redis::detail::engine_of(*primaries[0])));
    return std::make_shared<quorum_store>(primaries, std::move(strand));
}

} // namespace colock::detail
