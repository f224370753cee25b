// The lease store over one connection: the lock scripts by SHA (NOSCRIPT: load and call
// again), the release's retries under one shared deadline timer, the wake channel's
// subscription and pushes. The only unit of the lock layer that talks to the connection's
// engine.
#include "single_connection_store.hpp"

#include "errors.hpp"
#include "scripts.hpp"

#include "../redis/engine.hpp"

#include <colock/error.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <deque>
#include <optional>
#include <tuple>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr auto nothrow_awaitable = asio::as_tuple(asio::use_awaitable);

// The server's words when it refused a request (server_error), else empty.
std::string refusal_text(error_code ec, redis::response const& resp) {
    return ec == redis::error::server_error && !resp.empty() ? resp.back().text : std::string();
}

// An operation that the caller's cancellation does not reach: its outcome must be known.
auto uncancellable() {
    return asio::bind_cancellation_slot(asio::cancellation_slot(),
                                        asio::as_tuple(asio::use_awaitable));
}

// The 1 / 0 answer of the release and extend scripts; nothing for any other reply, which a
// broken proxy or server could send and which must never be read as "done" or "not ours".
std::optional<bool> script_flag(resp3::value const& v) {
    if (v.type != resp3::type::number)
        return std::nullopt;
    if (v.as_integer() == 1)
        return true;
    if (v.as_integer() == 0)
        return false;
    return std::nullopt;
}

// The release script's 2 / 1 / 0 (handed, freed, not ours); nothing for any other reply.
std::optional<int> release_flag(resp3::value const& v) {
    if (v.type != resp3::type::number)
        return std::nullopt;
    auto const n = v.as_integer();
    if (!n || *n < 0 || *n > 2)
        return std::nullopt;
    return static_cast<int>(*n);
}

// Wake-ups and connection events, from the connection's strand to the lock layer's.
struct wake_listener final : redis::push_listener, redis::detail::close_hook {
    wake_listener(std::weak_ptr<lease_events> e, std::string prefix,
                  asio::strand<asio::any_io_executor> s)
        : events(std::move(e)), channel_prefix(std::move(prefix)), strand(std::move(s)) {}

    std::weak_ptr<lease_events> events;
    std::string const channel_prefix;
    asio::strand<asio::any_io_executor> const strand;

    void on_push(resp3::value const& push) override {
        // ["message", channel, payload], or "smessage" for a sharded channel (a Cluster)
        if (push.elements.size() != 3 || (push.elements[0].as_string() != "message" &&
                                          push.elements[0].as_string() != "smessage"))
            return;
        auto self = events.lock();
        if (!self)
            return;
        auto channel = push.elements[1].as_string();
        auto payload = push.elements[2].as_string();
        if (!channel || !payload || !channel->starts_with(channel_prefix))
            return;
        asio::dispatch(strand, [self, c = std::string(*channel), p = std::string(*payload)] {
            self->on_message(c, p);
        });
    }

    void on_reconnect() override {
        if (auto self = events.lock())
            asio::dispatch(strand, [self] { self->on_reconnect(); });
    }

    void on_close() noexcept override {
        if (auto self = events.lock())
            self->on_connection_close(); // on this thread: see lease_events
    }

    void on_server_change() override {
        if (auto self = events.lock())
            asio::dispatch(strand, [self] { self->on_server_change(); });
    }
};

class single_connection_store final : public lease_store,
                                      public std::enable_shared_from_this<single_connection_store> {
public:
    single_connection_store(redis::detail::shared_engine engine,
                            asio::strand<asio::any_io_executor> strand)
        : engine_(std::move(engine))
        , sharded_(redis::detail::engine_shards_channels(engine_))
        , strand_(std::move(strand)) {}

    asio::strand<asio::any_io_executor> const& strand() const override { return strand_; }

private:
    // Declared before the members that await it, so its return type is known to them.
    template <class Token>
    auto exec(resp3::request req, Token token) {
        return asio::async_initiate<Token, void(error_code, redis::response)>(
            [this](auto handler, resp3::request r) {
                redis::detail::engine_exec(engine_, std::move(r), std::move(handler));
            },
            token, std::move(req));
    }

public:
    asio::awaitable<grant_result> grant(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, queueing queue,
                                        asio::cancellation_slot stop,
                                        replica_wait replicas) override {
        auto const ttl_text = std::to_string(ttl.count());
        std::string_view const queue_text = queue == queueing::never       ? "0"
                                            : queue == queueing::when_held ? "1"
                                                                           : "2";
        auto const entry_ttl_text = std::to_string(queue_entry_ttl.count());
        // Never negative (a clock set before 1970): the scripts read only digits there.
        auto const since_text = std::to_string(
            std::max<std::int64_t>(0, std::chrono::duration_cast<milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count()));
        std::tuple<error_code, resp3::value> reply;
        acknowledgement acked;
        if (replicas.count == 0)
            reply = co_await run_script(acquire_script(sharded_), stop, keys.key, keys.queue_key,
                                        keys.deadlines_key, token, ttl_text, keys.owner, queue_text,
                                        entry_ttl_text, keys.channel_prefix, since_text);
        else
            std::tie(reply, acked) = co_await run_script_then_wait(
                acquire_script(sharded_), stop, replicas, keys.key, keys.queue_key,
                keys.deadlines_key, token, ttl_text, keys.owner, queue_text, entry_ttl_text,
                keys.channel_prefix, since_text);
        auto& [ec, v] = reply;
        grant_result r;
        if (ec) {
            r.ec = ec;
            if (ec == redis::error::server_error)
                r.server_text = v.text;
            // Refused by the server, or stopped before it was sent: it did not run.
            r.outcome_unknown =
                ec != redis::error::server_error && ec != asio::error::operation_aborted;
            co_return r;
        }
        if (v.elements.size() != 3 || !v.elements[0].as_integer() || !v.elements[1].as_integer() ||
            !v.elements[2].as_integer()) {
            r.ec = error::unexpected_reply;
            r.server_text = resp3::to_debug_string(v);
            r.outcome_unknown = true; // a garbled reply came from a script that did run
            co_return r;
        }
        r.granted = *v.elements[0].as_integer() == 1;
        r.others_queued = *v.elements[2].as_integer() == 1;
        if (r.granted)
            r.fence = *v.elements[1].as_integer();
        else if (auto const pttl = *v.elements[1].as_integer(); pttl >= 0)
            r.holder_ttl = milliseconds(pttl);
        else if (pttl == -1)
            r.holder_ttl = milliseconds::max(); // set without expiry by hand: back off only
        else
            r.holder_ttl = milliseconds(0); // gone meanwhile: try again at once
        if (r.granted && acked.replicas < static_cast<std::int64_t>(replicas.count)) {
            // A failover to a replica without the lock could give it to someone else: give it
            // back now, and say why.
            auto const released = co_await release(keys, token, handoff_claim(ttl), r.fence);
            r.granted = false;
            r.fence = 0;
            r.outcome_unknown = released.ec.failed(); // the locker releases again on its way out
            r.ec = error::replicas_not_acknowledged;
            r.server_text = fmt::format(
                "{} of {} replicas acknowledged the lock within {} ms (WAIT){}; it was released",
                acked.replicas, replicas.count, replicas.timeout.count(),
                acked.refusal.empty() ? std::string() : ": WAIT refused: " + acked.refusal);
        }
        co_return r;
    }

    asio::awaitable<lease_reply> extend(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, std::int64_t fence) override {
        // EVAL, not EVALSHA: after a NOSCRIPT the extend would be sent again behind later
        // requests, and could land after the next holder's renewal in a cohort, setting the
        // lease to a ttl nobody counts on. One request keeps its place.
        resp3::request req;
        req.push("EVAL", extend_script().source, 1, keys.key, token, ttl.count(), fence);
        auto [ec, resp] = co_await exec(std::move(req), nothrow_awaitable);
        if (ec && ec != redis::error::server_error)
            co_return lease_reply{ec, false};
        if (resp.empty())
            co_return lease_reply{error::unexpected_reply, false};
        if (ec)
            co_return lease_reply{ec, false};
        auto const flag = script_flag(resp.back());
        if (!flag)
            co_return lease_reply{error::unexpected_reply, false};
        co_return lease_reply{error_code{}, *flag};
    }

    // The deadlines of all releases share one timer (they are all release_timeout long, so
    // they expire in the order they were set): no timer per unlock on the hot path.
    asio::awaitable<lease_reply> release(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence) override {
        auto const claim_text = std::to_string(claim.count());
        auto const fence_text = std::to_string(last_fence);
        auto deadline = std::make_shared<release_deadline>();
        watch_release(deadline);
        // When it ends, the shared timer stops if no other release needs it: an armed timer
        // would keep the io_context running for the whole deadline after the work is done.
        struct unwatch_on_exit {
            single_connection_store* self;
            std::shared_ptr<release_deadline>& watched;
            ~unwatch_on_exit() {
                watched.reset();
                self->release_finished();
            }
        } unwatch{this, deadline};
        // A connection lost before the reply leaves the outcome unknown: send it again until
        // the deadline. The script checks the token, so a repeat is harmless (it answers 0 if
        // the first one went through, so `true` is only reported when known).
        for (int round = 0;; ++round) {
            auto [ec, v] = co_await run_script(release_script(sharded_), deadline->stop.slot(),
                                               keys.key, keys.queue_key, keys.deadlines_key, token,
                                               keys.channel_prefix, claim_text, "", fence_text);
            if (!ec) {
                auto const released = release_flag(v);
                if (!released)
                    co_return lease_reply{error::unexpected_reply, false};
                co_return lease_reply{error_code{}, *released != 0, *released == 2};
            }
            if (deadline->fired)
                co_return lease_reply{error::timeout, false};
            if (!is_transient(ec, ec == redis::error::server_error ? v.text : std::string()))
                co_return lease_reply{ec, false};
            asio::steady_timer pause(strand_);
            pause.expires_after(
                std::min(milliseconds{20} * (1 << std::min(round, 4)), milliseconds{250}));
            co_await pause.async_wait(asio::bind_cancellation_slot(
                deadline->stop.slot(), asio::as_tuple(asio::use_awaitable)));
            if (deadline->fired)
                co_return lease_reply{error::timeout, false};
        }
    }

    // EVAL rather than EVALSHA: no NOSCRIPT, so the one request is all it takes.
    void release_in_background(lock_keys const& keys, std::string const& token, milliseconds claim,
                               std::int64_t last_fence, std::function<void()> retry) override {
        redis::detail::engine_exec(
            engine_, release_by_eval(keys, token, claim, last_fence, false),
            [strand = strand_, retry = std::move(retry)](error_code ec, redis::response resp) {
                if (!is_transient(ec, refusal_text(ec, resp)))
                    return;
                asio::dispatch(strand, std::move(retry));
            });
    }

    void give_back_in_background(lock_keys const& keys, std::string const& token,
                                 std::function<bool()> current) override {
        asio::co_spawn(strand_, give_back(shared_from_this(), keys, token, std::move(current)),
                       asio::detached);
    }

    void leave_queue(lock_keys const& keys, milliseconds claim) override {
        asio::co_spawn(strand_, leave(shared_from_this(), keys, claim), asio::detached);
    }

    asio::awaitable<std::pair<error_code, std::string>>
    subscribe(std::string const& channel) override {
        std::vector<std::string> channels(1, channel);
        auto token = uncancellable();
        auto [ec, text] =
            co_await asio::async_initiate<decltype(token), void(error_code, std::string)>(
                [this, &channels](auto handler) {
                    redis::detail::engine_change_subscription(engine_, true, std::move(channels),
                                                              std::move(handler));
                },
                token);
        co_return std::pair<error_code, std::string>{ec, std::move(text)};
    }

    void unsubscribe(std::string const& channel) override {
        redis::detail::engine_change_subscription(
            engine_, false, std::vector<std::string>(1, channel), [](error_code, std::string) {});
    }

    void listen(std::weak_ptr<lease_events> events, std::string channel_prefix) override {
        listener_ =
            std::make_shared<wake_listener>(std::move(events), std::move(channel_prefix), strand_);
        redis::detail::engine_add_listener(engine_, listener_);
        engine_->add_close_hook(listener_);
    }

    void stop_listening() override {
        if (listener_)
            redis::detail::engine_remove_listener(engine_, listener_.get());
    }

    asio::awaitable<lock_reading> read(lock_keys const& keys) override {
        auto [ec, v] = co_await run_script(status_script(), std::nullopt, keys.key, keys.queue_key,
                                           keys.deadlines_key);
        lock_reading r;
        if (ec) {
            r.ec = ec;
            r.server_text = ec == redis::error::server_error ? v.text : std::string();
            co_return r;
        }
        auto const value = v.elements.size() == 4 ? v.elements[0].as_string() : std::nullopt;
        if (!value || !v.elements[1].as_integer() || !v.elements[2].as_integer()) {
            r.ec = error::unexpected_reply;
            r.server_text = resp3::to_debug_string(v);
            co_return r;
        }
        r.value = std::string(*value);
        r.pttl = *v.elements[1].as_integer();
        r.queued = *v.elements[2].as_integer();
        co_return r;
    }

    asio::awaitable<record_reading> read_record(std::string const& key) override {
        resp3::request req;
        req.push("HGETALL", key);
        auto [ec, resp] = co_await exec(std::move(req), nothrow_awaitable);
        record_reading r;
        if (!ec && resp.empty())
            ec = error::unexpected_reply;
        if (ec) {
            r.ec = ec;
            if (ec == redis::error::server_error && !resp.empty())
                r.server_text = resp.back().text;
            co_return r;
        }
        auto const& v = resp.back();
        bool well_formed = v.type == resp3::type::map || v.type == resp3::type::array;
        well_formed = well_formed && v.elements.size() % 2 == 0;
        for (std::size_t i = 0; well_formed && i < v.elements.size(); i += 2) {
            auto const field = v.elements[i].as_string();
            auto const text = v.elements[i + 1].as_string();
            if (!field || !text)
                well_formed = false;
            else
                r.fields.emplace_back(std::string(*field), std::string(*text));
        }
        if (!well_formed) {
            r.fields.clear();
            r.ec = error::unexpected_reply;
            r.server_text = resp3::to_debug_string(v);
        }
        co_return r;
    }

    void write_record(std::string const& key,
                      std::vector<std::pair<std::string, std::string>> const& fields,
                      milliseconds ttl) override {
        resp3::request req;
        std::vector<std::string_view> args{key};
        for (auto const& [field, text] : fields) {
            args.push_back(field);
            args.push_back(text);
        }
        req.push_range("HSET", args);
        req.push("PEXPIRE", key, ttl.count());
        redis::detail::engine_exec(
            engine_, std::move(req),
            [engine = engine_, key](error_code ec, redis::response const& resp) {
                if (!ec || !redis::detail::engine_logs(engine, log_level::warning))
                    return;
                std::string const text = refusal_text(ec, resp);
                redis::detail::engine_log(
                    engine, log_level::warning,
                    fmt::format("colock: could not write the holder record {} ({}{}{}); status "
                                "will not show who holds this locker's locks",
                                key, ec.message(), text.empty() ? "" : ": ", text));
            });
    }

    asio::awaitable<forced_unlock_result> force_unlock(lock_keys const& keys,
                                                       std::string const& notify_prefix) override {
        auto const quarantine_text = std::to_string(forced_unlock_quarantine.count());
        // One server (or Sentinel's primary): the script tells the holder itself.
        std::string_view const tell_in_script = sharded_ ? std::string_view() : notify_prefix;
        auto [ec, v] = co_await run_script(force_unlock_script(), asio::cancellation_slot(),
                                           keys.key, "", "", quarantine_text, tell_in_script);
        forced_unlock_result r;
        if (ec) {
            r.ec = ec;
            r.server_text = ec == redis::error::server_error ? v.text : std::string();
            co_return r;
        }
        auto const ended = v.elements.empty() ? std::nullopt : v.elements[0].as_integer();
        if (!ended || (*ended == 1 && (v.elements.size() != 3 || !v.elements[1].as_string() ||
                                       !v.elements[2].as_string()))) {
            r.ec = error::unexpected_reply;
            r.server_text = resp3::to_debug_string(v);
            co_return r;
        }
        if (*ended != 1)
            co_return r;
        r.ended = true;
        r.owner = std::string(*v.elements[1].as_string());
        r.token = std::string(*v.elements[2].as_string());
        if (!sharded_)
            co_return r;
        // A Cluster: told from here. The lease is ended whatever happens to the message: a
        // holder that misses it finds out at its next renewal.
        resp3::request tell;
        tell.push("SPUBLISH", notify_prefix + r.owner, fmt::format("f {} {}", r.token, keys.key));
        co_await exec(std::move(tell), uncancellable());
        co_return r;
    }

    bool is_connected() const noexcept override {
        return redis::detail::engine_is_connected(engine_);
    }
    std::string last_error_text() const override {
        return redis::detail::engine_last_error_text(engine_);
    }
    std::uint64_t server_changes(lock_keys const& keys) const noexcept override {
        return redis::detail::engine_server_changes_for(engine_, keys.key);
    }
    std::uint64_t reconnects() const noexcept override {
        return redis::detail::engine_reconnects(engine_);
    }
    bool logs(log_level level) const noexcept override {
        return redis::detail::engine_logs(engine_, level);
    }
    void log(log_level level, std::string_view line) const noexcept override {
        redis::detail::engine_log(engine_, level, line);
    }

private:
    // One script by SHA (three keys, "" for those it does not use), through `cancel_by` when
    // given, else the awaiting coroutine's own cancellation. The arguments are views of the
    // caller's locals, which outlive the call.
    template <class... Args>
    asio::awaitable<std::tuple<error_code, resp3::value>>
    run_script(script const& s, std::optional<asio::cancellation_slot> cancel_by,
               std::string_view key1, std::string_view key2, std::string_view key3, Args... args) {
        auto make = [&](bool load) {
            resp3::request req;
            if (load)
                req.push("SCRIPT", "LOAD", s.source);
            if (key2.empty())
                req.push("EVALSHA", s.sha, 1, key1, args...);
            else
                req.push("EVALSHA", s.sha, 3, key1, key2, key3, args...);
            return req;
        };
        for (int round = 0; round < 2; ++round) {
            auto req = make(round == 1);
            // Not a ?: of two co_awaits: GCC 12 destroys that temporary too early.
            std::tuple<error_code, redis::response> reply;
            if (!cancel_by)
                reply = co_await exec(std::move(req), nothrow_awaitable); // the caller's
            else
                reply = co_await exec(
                    std::move(req),
                    asio::bind_cancellation_slot(*cancel_by, asio::as_tuple(asio::use_awaitable)));
            auto& [ec, resp] = reply;
            if (ec == redis::error::server_error && round == 0 && !resp.empty() &&
                resp.back().text.starts_with("NOSCRIPT"))
                continue; // server restarted or SCRIPT FLUSH: load it and call again, once
            if (ec && ec != redis::error::server_error)
                co_return std::tuple{ec, resp3::value{}};
            if (resp.empty())
                co_return std::tuple{error_code(error::unexpected_reply), resp3::value{}};
            co_return std::tuple{ec, std::move(resp.back())};
        }
        co_return std::tuple{error_code(error::unexpected_reply), resp3::value{}};
    }

    // The replicas' answer to a WAIT.
    struct acknowledgement {
        std::int64_t replicas = 0;
        std::string refusal; // the server's text when it refused WAIT (an ACL without it)
    };

    // run_script for the acquire script, with WAIT behind it in the same pipeline, so that it
    // counts the replicas that have the script's writes (WAIT counts this connection's writes:
    // a reconnection in between would fail the request instead).
    template <class... Args>
    asio::awaitable<std::tuple<std::tuple<error_code, resp3::value>, acknowledgement>>
    run_script_then_wait(script const& s, asio::cancellation_slot cancel_by, replica_wait wait,
                         std::string_view key1, std::string_view key2, std::string_view key3,
                         Args... args) {
        using result = std::tuple<std::tuple<error_code, resp3::value>, acknowledgement>;
        for (int round = 0; round < 2; ++round) {
            resp3::request req;
            if (round == 1)
                req.push("SCRIPT", "LOAD", s.source);
            req.push("EVALSHA", s.sha, 3, key1, key2, key3, args...);
            req.push("WAIT", wait.count, wait.timeout.count());
            auto [ec, resp] = co_await exec(
                std::move(req),
                asio::bind_cancellation_slot(cancel_by, asio::as_tuple(asio::use_awaitable)));
            if (ec && ec != redis::error::server_error)
                co_return result{{ec, resp3::value{}}, {}};
            if (resp.size() < 2)
                co_return result{{error_code(error::unexpected_reply), resp3::value{}}, {}};
            auto& answer = resp[resp.size() - 2];
            auto const& waited = resp.back();
            if (round == 0 && answer.is_error() && answer.text.starts_with("NOSCRIPT"))
                continue; // server restarted or SCRIPT FLUSH: load it and call again, once
            acknowledgement acked;
            if (waited.is_error())
                acked.refusal = waited.text;
            else
                acked.replicas = waited.as_integer().value_or(0);
            error_code const script_ec =
                answer.is_error() ? error_code(redis::error::server_error) : error_code();
            co_return result{{script_ec, std::move(answer)}, std::move(acked)};
        }
        co_return result{{error_code(error::unexpected_reply), resp3::value{}}, {}};
    }

    // The release script by EVAL, not EVALSHA: one request, which keeps its place in the
    // connection's order (a NOSCRIPT would send it again behind later requests). `leave_free`:
    // not handed to a queued locker (ARGV[6]).
    resp3::request release_by_eval(lock_keys const& keys, std::string const& token,
                                   milliseconds claim, std::int64_t last_fence,
                                   bool leave_free) const {
        resp3::request req;
        req.push("EVAL", release_script(sharded_).source, 3, keys.key, keys.queue_key,
                 keys.deadlines_key, token, keys.channel_prefix, claim.count(), "", last_fence,
                 leave_free ? "1" : "0");
        return req;
    }

    // The lock freed if `token` holds it; over passing errors while `current()`, until
    // release_timeout. Started on the strand, so its request follows any sent before, and is
    // sent only while no newer acquisition with the same token was: it must never run after
    // one. Hence EVAL rather than EVALSHA: a NOSCRIPT (a primary restarted, its first release)
    // would send it again after the newer acquisition, taking back what that one granted.
    static asio::awaitable<void> give_back(std::shared_ptr<single_connection_store> self,
                                           lock_keys keys, std::string token,
                                           std::function<bool()> current) {
        auto const deadline = clock_type::now() + release_timeout;
        for (int round = 0; current() && clock_type::now() < deadline; ++round) {
            auto [ec, resp] = co_await self->exec(
                self->release_by_eval(keys, token, milliseconds(0), 0, true), nothrow_awaitable);
            if (!ec || !is_transient(ec, refusal_text(ec, resp)))
                co_return;
            asio::steady_timer pause(self->strand_);
            pause.expires_after(
                std::min(milliseconds{20} * (1 << std::min(round, 4)), milliseconds{250}));
            co_await pause.async_wait(nothrow_awaitable);
        }
    }

    // Out of the queue, passing on a hand-off; a few tries over passing errors, no more: the
    // entry and the claim lapse by themselves.
    static asio::awaitable<void> leave(std::shared_ptr<single_connection_store> self,
                                       lock_keys keys, milliseconds claim) {
        auto const claim_text = std::to_string(claim.count());
        for (int round = 0; round < 3; ++round) {
            auto [ec, v] = co_await self->run_script(
                release_script(self->sharded_), asio::cancellation_slot(), keys.key, keys.queue_key,
                keys.deadlines_key, "", keys.channel_prefix, claim_text, keys.owner, "0");
            if (!ec || !is_transient(ec, ec == redis::error::server_error ? v.text : std::string()))
                co_return;
            asio::steady_timer pause(self->strand_);
            pause.expires_after(milliseconds{50 << round});
            co_await pause.async_wait(nothrow_awaitable);
        }
    }

    struct release_deadline {
        asio::cancellation_signal stop;
        bool fired = false;
    };
    struct watched_release {
        clock_type::time_point deadline;
        std::weak_ptr<release_deadline> release;
    };

    void watch_release(std::shared_ptr<release_deadline> const& d) {
        // Releases finish in about the order they start: drop the finished ones up front.
        while (!release_watch_.empty() && release_watch_.front().release.expired())
            release_watch_.pop_front();
        release_watch_.push_back({clock_type::now() + release_timeout, d});
        if (!release_timer_armed_)
            arm_release_timer();
    }

    void release_finished() {
        while (!release_watch_.empty() && release_watch_.front().release.expired())
            release_watch_.pop_front();
        if (release_watch_.empty() && release_timer_armed_) {
            release_timer_armed_ = false;
            release_timer_->cancel();
        }
    }

    void arm_release_timer() {
        while (!release_watch_.empty() && release_watch_.front().release.expired())
            release_watch_.pop_front();
        if (release_watch_.empty()) {
            release_timer_armed_ = false;
            return;
        }
        release_timer_armed_ = true;
        if (!release_timer_)
            release_timer_.emplace(strand_);
        release_timer_->expires_at(release_watch_.front().deadline);
        release_timer_->async_wait([weak = weak_from_this()](error_code ec) {
            auto self = weak.lock();
            if (ec || !self)
                return;
            auto const now = clock_type::now();
            while (!self->release_watch_.empty() && self->release_watch_.front().deadline <= now) {
                if (auto d = self->release_watch_.front().release.lock()) {
                    d->fired = true;
                    d->stop.emit(asio::cancellation_type::terminal);
                }
                self->release_watch_.pop_front();
            }
            self->arm_release_timer();
        });
    }

    redis::detail::shared_engine const engine_;
    // A Cluster: wake channels are sharded (SPUBLISH in the scripts, SSUBSCRIBE).
    bool const sharded_;
    asio::strand<asio::any_io_executor> const strand_;
    std::shared_ptr<wake_listener> listener_;
    // On the strand:
    std::deque<watched_release> release_watch_; // in deadline order
    std::optional<asio::steady_timer> release_timer_;
    bool release_timer_armed_ = false;
};

} // namespace

std::shared_ptr<lease_store> make_single_connection_store(redis::connection& conn) {
    auto const& engine = redis::detail::engine_of(conn);
    return std::make_shared<single_connection_store>(
        engine, asio::make_strand(redis::detail::engine_executor(engine)));
}

std::shared_ptr<lease_store>
make_single_connection_store(redis::detail::shared_engine engine,
                             asio::strand<asio::any_io_executor> strand) {
    return std::make_shared<single_connection_store>(std::move(engine), std::move(strand));
}

} // namespace colock::detail
