// The lease store over one connection: the lock scripts' keys and arguments, sent through the
// script client and read by the pure parsers of lock_replies.hpp.
#include "lock/store/single_connection_store.hpp"

#include "lock/base/errors.hpp"
#include "lock/store/free_values.hpp"
#include "lock/store/lock_arguments.hpp"
#include "lock/store/lock_replies.hpp"
#include "lock/store/lock_scripts.hpp"
#include "lock/store/name_sets.hpp"
#include "lock/store/permit_requests.hpp"
#include "lock/store/renewal_batch.hpp"
#include "lock/store/script_client.hpp"

#include "redis/cluster_slots.hpp"
#include "redis/engine.hpp"

#include <colock/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>

#include <algorithm>
#include <limits>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

namespace {

// The one-key release (release_known) of a lease whose value the holder's process knows, with a
// last fence given: not for a lease with a record (an election's term, which the general release
// ends), nor for one whose fence is unknown (0: a release of an attempt of unknown outcome).
std::optional<known_release> known_release_of(lock_keys const& keys, std::string_view token,
                                              std::int64_t last_fence,
                                              std::optional<held_value> const& written) {
    if (!written || !keys.record_key.empty() || last_fence <= 0)
        return std::nullopt;
    return known_release_arguments(keys.owner, token, *written, last_fence);
}

// A campaign's claim of its term is sent again over passing errors, pausing 20 ms, doubled up
// to 250 ms.
constexpr milliseconds proclaim_first_retry_pause{20};
constexpr milliseconds proclaim_max_retry_pause{250};

class single_connection_store final : public lease_store,
                                      public std::enable_shared_from_this<single_connection_store> {
public:
    single_connection_store(redis::detail::shared_engine engine,
                            asio::strand<asio::any_io_executor> strand)
        : client_(std::make_shared<script_client>(std::move(engine), std::move(strand))) {}

    asio::strand<asio::any_io_executor> const& strand() const override { return client_->strand(); }

    asio::awaitable<grant_result> grant(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, queueing queue,
                                        asio::cancellation_slot stop,
                                        replica_wait replicas) override {
        // Never negative (a clock set before 1970): the scripts read only digits there.
        auto const since_ms =
            std::max<std::int64_t>(0, std::chrono::duration_cast<milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
        if (replicas.count == 0 && queue != queueing::stay_after_grant)
            if (auto const free_fence = free_values_.take(keys.key, lock_clock::now())) {
                // A name this store's release left free: one key, no parsing at the server.
                held_value const written{*free_fence + 1, since_ms};
                if (auto const a =
                        known_acquire_arguments(*free_fence, keys.owner, token, written, ttl)) {
                    script_call const quick{
                        client_->scripts().acquire_known, {keys.key}, {(*a)[0], (*a)[1], (*a)[2]}};
                    if (auto r = read_known_grant(co_await client_->run(quick, stop), written))
                        co_return std::move(*r);
                }
            }
        // The claim of a hand-off this attempt makes when the key is gone and another locker
        // heads the queue, as long as a release's.
        auto const args = acquire_arguments(keys.owner, token, since_ms, ttl, queue,
                                            queue_entry_ttl, handoff_claim(ttl));
        script_call const call{client_->scripts().acquire,
                               {keys.key, keys.queue_key, keys.deadlines_key},
                               {args[0], args[1], args[2]}};
        // A grant with nobody queued wrote the holder's value with this clock (a retry after a
        // lost reply finds the first one's: its release then takes the general path).
        auto const note_written = [&](grant_result& r) {
            if (r.granted && !r.others_queued && queue != queueing::stay_after_grant)
                r.written = held_value{r.fence, since_ms};
        };
        if (replicas.count == 0) {
            auto r = read_grant(co_await client_->run(call, stop));
            note_written(r);
            co_return r;
        }
        auto [reply, acked] =
            co_await client_->run_then_wait(call, replicas.count, replicas.timeout, stop);
        auto r = read_grant(reply);
        note_written(r);
        if (r.granted && acked.replicas < static_cast<std::int64_t>(replicas.count)) {
            // A failover to a replica without the lock could give it to someone else: give it
            // back now, and say why.
            auto const released =
                co_await release(keys, token, handoff_claim(ttl), r.fence, r.written);
            r.written.reset();
            r.granted = false;
            r.fence = 0;
            r.outcome_unknown = released.ec.failed(); // the locker releases again on its way out
            r.ec = error::replicas_not_acknowledged;
            r.server_text = replicas_failure_text(acked, replicas);
        }
        co_return r;
    }

    asio::awaitable<lease_reply> extend(lock_keys const& keys, std::string const& token,
                                        milliseconds ttl, std::int64_t fence,
                                        std::optional<held_value> renewal) override {
        // A renewal of a value this process knows goes in a batch: not one with a record (an
        // election's term, whose record the general extend renews too) nor one whose fence the
        // key must learn.
        bool changed = false;
        if (renewal && keys.record_key.empty() && fence <= renewal->fence) {
            auto const b = co_await batch_->extend(
                keys.key, held_value_text(keys.owner, token, *renewal), ttl);
            if (b.how == batched_extension::kind::answered)
                co_return b.reply;
            changed = b.how == batched_extension::kind::changed;
        }
        // On a server without the script, the repeat goes out behind later requests: it could
        // land after the renewal of the next holder in a cohort, setting the lease to a ttl
        // nobody counts on. That holder's lease is another (the baton carries values), and this
        // one's renewal is cancelled before it is handed on: a cancelled call is not repeated
        // (script_client::run).
        auto const ttl_text = std::to_string(ttl.count());
        auto const fence_text = std::to_string(fence);
        script_call const call{
            client_->scripts().extend, {keys.key}, {token, ttl_text, fence_text}, keys.record_key};
        auto r = read_extend(co_await client_->run(call));
        r.value_changed = changed && !r.ec && r.ours;
        co_return r;
    }

    asio::awaitable<lease_reply> release(lock_keys const& keys, std::string const& token,
                                         milliseconds claim, std::int64_t last_fence,
                                         std::optional<held_value> written) override {
        // A connection lost before the reply leaves the outcome unknown: sent again until the
        // deadline. The scripts check the token, so a repeat is harmless (it answers 0 if the
        // first one went through, so `true` is only reported when known).
        if (auto const known = known_release_of(keys, token, last_fence, written)) {
            script_call const quick{
                client_->scripts().release_known, {keys.key}, {known->args[0], known->args[1]}};
            auto const id = free_values_.remember(keys.key, known->free_fence, written->until);
            auto r = read_known_release(co_await client_->run_retrying(quick, release_retries));
            if (!r || r->ec)
                free_values_.forget(keys.key, id);
            if (r)
                co_return *r;
        }
        auto const args = release_arguments(release_kind::hand_on, token, claim, last_fence);
        script_call const call{client_->scripts().release,
                               {keys.key, keys.queue_key, keys.deadlines_key},
                               {args[0], args[1]},
                               keys.record_key};
        co_return read_release(co_await client_->run_retrying(call, release_retries));
    }

    void release_in_background(lock_keys const& keys, std::string const& token, milliseconds claim,
                               std::int64_t last_fence, std::optional<held_value> written,
                               std::function<void()> retry) override {
        // A repeat on a server without the script goes out after what the caller sent next:
        // harmless, the scripts act on this lease's token only, which no later call uses.
        auto const on_reply = [strand = strand(),
                               retry = std::move(retry)](script_reply const& reply) {
            if (reply.ec && is_transient(reply.ec, reply.server_text()))
                asio::dispatch(strand, retry);
        };
        if (auto const known = known_release_of(keys, token, last_fence, written)) {
            script_call const quick{
                client_->scripts().release_known, {keys.key}, {known->args[0], known->args[1]}};
            // The general release, when the key held something else, goes out from the reply's
            // strand: after what the caller sent meanwhile, which is harmless as above.
            auto const id = free_values_.remember(keys.key, known->free_fence, written->until);
            client_->run_detached(quick, [self = shared_from_this(), keys, token, claim, last_fence,
                                          id, on_reply](script_reply const& reply) {
                auto const r = read_known_release(reply);
                if (!r || r->ec)
                    self->free_values_.forget(keys.key, id);
                if (!r)
                    return self->send_release(keys, token, claim, last_fence, on_reply);
                on_reply(reply);
            });
            return;
        }
        send_release(keys, token, claim, last_fence, on_reply);
    }

    void give_back_in_background(lock_keys const& keys, std::string const& token,
                                 std::function<bool()> current) override {
        asio::co_spawn(strand(), give_back(shared_from_this(), keys, token, std::move(current)),
                       asio::detached);
    }

    void leave_queue(lock_keys const& keys, milliseconds claim) override {
        // The first attempt is handed to the connection here, on the caller's thread, so that
        // it goes out before anything the caller does next: a close() right after a cancelled
        // co_lock still sends it (a graceful close sends what was asked before it). A passing
        // failure goes on with the retrying one on the strand.
        auto const args = release_arguments(release_kind::leave, keys.owner, claim, 0);
        script_call const call{client_->scripts().release,
                               {keys.key, keys.queue_key, keys.deadlines_key},
                               {args[0], args[1]}};
        client_->run_detached(
            call, [self = shared_from_this(), keys, claim](script_reply const& reply) {
                if (reply.ec && is_transient(reply.ec, reply.server_text()))
                    asio::co_spawn(self->strand(), leave(self, keys, claim), asio::detached);
            });
    }

    asio::awaitable<std::pair<error_code, std::string>>
    subscribe(std::string const& channel) override {
        return client_->subscribe(channel);
    }
    void unsubscribe(std::string const& channel) override { client_->unsubscribe(channel); }

    void listen(std::weak_ptr<channel_events> events, std::string channel_prefix) override {
        client_->listen(std::move(events), std::move(channel_prefix));
    }
    void stop_listening() override { client_->stop_listening(); }

    asio::awaitable<lock_reading> read(lock_keys const& keys) override {
        script_call const call{
            client_->scripts().status, {keys.key, keys.queue_key, keys.deadlines_key}, {}};
        co_return read_lock(co_await client_->run(call));
    }

    asio::awaitable<record_reading> read_record(std::string const& key) override {
        resp3::request req;
        req.push("HGETALL", key);
        co_return detail::read_record(co_await client_->exec(std::move(req)));
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
        client_->exec_detached(std::move(req), [client = client_, key](script_reply const& reply) {
            if (!reply.ec || !client->logs(log_level::warning))
                return;
            auto const text = reply.server_text();
            client->log(log_level::warning,
                        fmt::format("colock: could not write the holder record {} ({}{}{}); status "
                                    "will not show who holds this locker's locks",
                                    key, reply.ec.message(), text.empty() ? "" : ": ", text));
        });
    }

    asio::awaitable<forced_unlock_result> force_unlock(lock_keys const& keys,
                                                       std::string const& notify_prefix) override {
        auto const quarantine_text = std::to_string(forced_unlock_quarantine.count());
        // One server (or Sentinel's primary): the script tells the holder itself.
        std::string_view const tell_in_script =
            client_->scripts().publishes_beyond_slot() ? notify_prefix : std::string_view();
        // The record's key, as an election's would be: a lock named so has none, and the
        // script ends only a record of the lease it ends. (A local: the call holds views.)
        std::string const record_key = keys.key + ":e";
        script_call const call{client_->scripts().force_unlock,
                               {keys.key, record_key},
                               {quarantine_text, tell_in_script}};
        auto r = read_forced_unlock(co_await client_->run(call, asio::cancellation_slot()));
        if (!r.ended || client_->scripts().publishes_beyond_slot())
            co_return r;
        // A Cluster: told from here. The lease is ended whatever happens to the message: a
        // holder that misses it finds out at its next renewal.
        resp3::request tell;
        // A lock set's holder is its entry "<locker>/<n>": its locker is told.
        tell.push("SPUBLISH", notify_prefix + r.owner.substr(0, r.owner.find('/')),
                  fmt::format("f {} {}", r.token, keys.key));
        co_await client_->exec(std::move(tell), false);
        co_return r;
    }

    std::string refusal_of(holding_kind) const override { return {}; }

    asio::awaitable<proclaim_result> proclaim(lock_keys const& keys,
                                              proclaim_request const& request) override {
        // Locals: the call holds views.
        auto const term = std::to_string(request.term);
        auto const version = std::to_string(request.version);
        script_call const call{client_->scripts().proclaim,
                               {keys.key, keys.record_key},
                               {request.token, term, request.value, request.owner, version}};
        // Not a conditional expression of two co_awaits: GCC 12 miscompiles that.
        script_reply reply;
        if (request.retrying)
            reply = co_await client_->run_retrying(
                call,
                retry_schedule{std::numeric_limits<int>::max(), proclaim_first_retry_pause,
                               proclaim_max_retry_pause, request.lease_left},
                request.still_ours);
        else if (request.cancellable)
            reply = co_await client_->run(call);
        else
            reply = co_await client_->run(call, asio::cancellation_slot());
        co_return read_proclaim(reply);
    }

    asio::awaitable<election_reading> read_election(lock_keys const& keys) override {
        script_call const call{client_->scripts().election_read, {keys.key, keys.record_key}, {}};
        co_return detail::read_election(co_await client_->run(call));
    }

    // ------------------------------------------------------------------ permits

    asio::awaitable<permit_grant> grant_permits(semaphore_keys const& keys,
                                                permit_request const& request,
                                                asio::cancellation_slot stop) override {
        return permits_.grant(keys, request, stop);
    }
    asio::awaitable<permit_extension> extend_permits(semaphore_keys const& keys,
                                                     std::string const& token, milliseconds ttl,
                                                     bool weigh) override {
        return permits_.extend(keys, token, ttl, weigh);
    }
    asio::awaitable<lease_reply> downgrade_permits(semaphore_keys const& keys,
                                                   std::string const& token) override {
        return permits_.downgrade(keys, token);
    }
    asio::awaitable<lease_reply> release_permits(semaphore_keys const& keys,
                                                 std::string const& token, std::size_t permits,
                                                 bool leave) override {
        return permits_.release(keys, token, permits, leave);
    }
    void release_permits_in_background(semaphore_keys const& keys, std::string const& token,
                                       std::size_t permits, bool leave,
                                       std::function<void()> retry) override {
        permits_.release_in_background(keys, token, permits, leave, std::move(retry));
    }
    asio::awaitable<semaphore_reading> read_permits(semaphore_keys const& keys,
                                                    std::size_t listed) override {
        return permits_.read(keys, listed);
    }
    std::uint64_t permit_server_changes(semaphore_keys const& keys) const noexcept override {
        return client_->server_changes_for(keys.key);
    }

    // ------------------------------------------------------------------ lock sets

    asio::awaitable<names_grant> grant_names(std::span<lock_keys const> keys,
                                             names_request const& request,
                                             asio::cancellation_slot stop) override {
        return names_.grant(keys, request, stop);
    }
    asio::awaitable<lease_reply> extend_names(std::span<lock_keys const> keys,
                                              std::string const& token, milliseconds ttl) override {
        return names_.extend(keys, token, ttl);
    }
    asio::awaitable<lease_reply> release_names(std::span<lock_keys const> keys,
                                               std::string const& entry, std::string const& token,
                                               bool leave,
                                               std::span<std::int64_t const> last_fences) override {
        return names_.release(keys, entry, token, leave, last_fences);
    }
    void release_names_in_background(std::span<lock_keys const> keys, std::string const& entry,
                                     std::string const& token, bool leave,
                                     std::span<std::int64_t const> last_fences,
                                     std::function<void()> retry) override {
        names_.release_in_background(keys, entry, token, leave, last_fences, std::move(retry));
    }
    // One call runs on one Cluster slot (a set over several would fail with CROSSSLOT).
    std::uint32_t names_shard(lock_keys const& keys) const override {
        if (client_->scripts().variant != script_variant::sharded)
            return 0;
        return redis::detail::hash_slot(keys.key);
    }

    // ------------------------------------------------------------------ facts

    bool is_connected() const noexcept override { return client_->is_connected(); }
    std::string last_error_text() const override { return client_->last_error_text(); }
    std::uint64_t server_changes(lock_keys const& keys) const noexcept override {
        return client_->server_changes_for(keys.key);
    }
    std::uint64_t reconnects() const noexcept override { return client_->reconnects(); }
    bool logs(log_level level) const noexcept override { return client_->logs(level); }
    void log(log_level level, std::string_view line) const noexcept override {
        client_->log(level, line);
    }

private:
    // The lock freed if `token` holds it, not handed to a queued locker; while `current()`.
    // Started on the strand, so its request follows any sent before, and is sent only while no
    // newer acquisition with the same token was: it must never run after one. Its repeat on a
    // server without the script (a primary restarted, its first release) is sent only while
    // `current()` too, checked on the strand just before.
    static asio::awaitable<void> give_back(std::shared_ptr<single_connection_store> self,
                                           lock_keys keys, std::string token,
                                           std::function<bool()> current) {
        auto const args = release_arguments(release_kind::free_only, token, milliseconds(0), 0);
        script_call const call{self->client_->scripts().release,
                               {keys.key, keys.queue_key, keys.deadlines_key},
                               {args[0], args[1]},
                               keys.record_key};
        co_await self->client_->run_retrying(call, release_retries, std::move(current));
    }

    // Out of the queue, passing on a hand-off; sent again over passing errors.
    static asio::awaitable<void> leave(std::shared_ptr<single_connection_store> self,
                                       lock_keys keys, milliseconds claim) {
        auto const args = release_arguments(release_kind::leave, keys.owner, claim, 0);
        script_call const call{self->client_->scripts().release,
                               {keys.key, keys.queue_key, keys.deadlines_key},
                               {args[0], args[1]}};
        co_await self->client_->run_retrying(call, leave_retries);
    }

    // The general release, handed to the connection now; `done` gets its reply.
    void send_release(lock_keys const& keys, std::string const& token, milliseconds claim,
                      std::int64_t last_fence, std::function<void(script_reply)> done) {
        auto const args = release_arguments(release_kind::hand_on, token, claim, last_fence);
        script_call const call{client_->scripts().release,
                               {keys.key, keys.queue_key, keys.deadlines_key},
                               {args[0], args[1]},
                               keys.record_key};
        client_->run_detached(call, std::move(done));
    }

    std::shared_ptr<script_client> const client_;
    permit_requests const permits_{client_};
    name_set_requests const names_{client_};
    free_values free_values_;
    std::shared_ptr<renewal_batch> const batch_ = std::make_shared<renewal_batch>(client_);
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
