// A semaphore's requests and its waiting calls: the acquire (one attempt, or a wait in the
// server's queue woken by targeted messages), the release and extension of a holding, and the
// read of the free permits.
#include "lock/semaphore/semaphore_core.hpp"

#include "lock/base/errors.hpp"
#include "lock/base/request_stop.hpp"
#include "lock/base/token.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/store/semaphore_scripts.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <array>
#include <limits>
#include <random>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

namespace {

std::shared_ptr<script_client> client_of(locker_context const& l, std::string_view kind,
                                         std::string const& name) {
    auto clients = l.store().script_clients();
    if (clients.empty())
        throw system_error(
            error::invalid_argument,
            fmt::format("colock: {} '{}': the locker's store runs no scripts", kind, name));
    if (clients.size() > 1)
        throw system_error(
            error::invalid_argument,
            fmt::format("colock: {} '{}': a locker over {} independent primaries (Redlock) "
                        "cannot hold one: its holdings would be counted on each primary apart, "
                        "and a majority of them does not bound the holders; use a locker over "
                        "one connection (one server, Sentinel or Cluster)",
                        kind, name, clients.size()));
    return std::move(clients.front());
}

std::string ms_text(milliseconds d) {
    return std::to_string(d.count());
}

} // namespace

semaphore_keys::semaphore_keys(std::string const& prefix, std::string_view name,
                               std::string_view owner)
    : key(fmt::format("{}{{{}}}", prefix, name))
    , permits_key(key + ":h")
    , weights_key(key + ":hw")
    , queue_key(key + ":q")
    , entries_key(key + ":qd")
    , channel_prefix(key + ":w:")
    , channel(channel_prefix + std::string(owner)) {}

semaphore_core::semaphore_core(std::shared_ptr<locker_context> locker, std::string_view kind,
                               std::string_view kind_prefix, std::string name, std::size_t capacity)
    : locker_(std::move(locker))
    , client_(client_of(*locker_, kind, name))
    , kind_(kind)
    , name_(std::move(name))
    , capacity_(capacity)
    , capacity_text_(std::to_string(capacity))
    , keys_(locker_->prefix() + std::string(kind_prefix), name_, locker_->id()) {}

semaphore_core::~semaphore_core() = default;

asio::strand<asio::any_io_executor> const& semaphore_core::locker_strand() const noexcept {
    return locker_->strand();
}

// ------------------------------------------------------------------ requests

asio::awaitable<permit_grant> semaphore_core::attempt(std::string const& token, std::size_t permits,
                                                      bool new_fence, milliseconds ttl, bool queue,
                                                      asio::cancellation_state cs,
                                                      clock_type::time_point deadline) {
    request_stop const stop(cs, locker_->strand(), deadline);
    auto const count = std::to_string(permits);
    auto const ttl_ms = ms_text(ttl);
    auto const life = ms_text(queue_entry_ttl);
    auto const claim = ms_text(max_handoff_claim);
    script_call const call{
        client_->scripts().semaphore_acquire,
        {keys_.key, keys_.permits_key, keys_.weights_key, keys_.queue_key, keys_.entries_key},
        {token, count, capacity_text_, ttl_ms, locker_->id(), queue ? "1" : "0", life,
         new_fence ? "1" : "0", keys_.channel_prefix, claim}};
    co_return read_permit_grant(co_await client_->run(call, send_as::sha, stop.slot()));
}

asio::awaitable<lease_reply> semaphore_core::extend(std::string const& token, milliseconds ttl) {
    auto const ttl_ms = ms_text(ttl);
    script_call const call{client_->scripts().semaphore_extend,
                           {keys_.key, keys_.permits_key, keys_.weights_key},
                           {token, ttl_ms}};
    co_return read_permit_reply(co_await client_->run(call, send_as::sha));
}

asio::awaitable<permit_extension> semaphore_core::extend_weighing(std::string const& token,
                                                                  milliseconds ttl) {
    auto const ttl_ms = ms_text(ttl);
    script_call const call{client_->scripts().semaphore_extend,
                           {keys_.key, keys_.permits_key, keys_.weights_key},
                           {token, ttl_ms, "1"}};
    co_return read_permit_extension(co_await client_->run(call, send_as::sha));
}

asio::awaitable<lease_reply> semaphore_core::downgrade(std::string const& token) {
    auto const claim = ms_text(max_handoff_claim);
    script_call const call{
        client_->scripts().semaphore_downgrade,
        {keys_.key, keys_.permits_key, keys_.weights_key, keys_.queue_key, keys_.entries_key},
        {token, keys_.channel_prefix, claim}};
    co_return read_permit_reply(
        co_await client_->run_retrying(call, send_as::sha, release_retries));
}

asio::awaitable<lease_reply> semaphore_core::release(std::string const& token, std::size_t permits,
                                                     bool leave) {
    auto const count = std::to_string(permits);
    auto const claim = ms_text(max_handoff_claim);
    script_call const call{
        client_->scripts().semaphore_release,
        {keys_.key, keys_.permits_key, keys_.weights_key, keys_.queue_key, keys_.entries_key},
        {token, keys_.channel_prefix, claim, leave ? "1" : "0", count}};
    co_return read_permit_reply(co_await client_->run_retrying(
        call, send_as::sha, leave ? leave_retries : release_retries));
}

void semaphore_core::release_detached(std::string token, std::size_t permits, bool leave) {
    auto const count = std::to_string(permits);
    auto const claim = ms_text(max_handoff_claim);
    script_call const call{
        client_->scripts().semaphore_release,
        {keys_.key, keys_.permits_key, keys_.weights_key, keys_.queue_key, keys_.entries_key},
        {token, keys_.channel_prefix, claim, leave ? "1" : "0", count}};
    client_->run_detached(
        call, [self = shared_from_this(), token, permits, leave](script_reply const& reply) {
            if (!reply.ec || !is_transient(reply.ec, reply.server_text()))
                return;
            asio::co_spawn(
                self->locker_->strand(),
                [](std::shared_ptr<semaphore_core> core, std::string t, std::size_t n,
                   bool l) -> asio::awaitable<void> {
                    co_await core->release(t, n, l);
                }(self, token, permits, leave),
                asio::detached);
        });
}

asio::awaitable<semaphore_reading> semaphore_core::read() {
    script_call const call{
        client_->scripts().semaphore_read,
        {keys_.key, keys_.permits_key, keys_.weights_key, keys_.queue_key, keys_.entries_key},
        {}};
    auto r = read_semaphore(co_await client_->run(call, send_as::sha));
    if (r.ec)
        throw system_error(error_code(r.ec.value(), r.ec.category()),
                           fmt::format("colock: read of {} '{}': {}", kind_, name_,
                                       failure_text(r.ec, r.server_text, lock_options{}, false)));
    if (r.capacity && *r.capacity != std::to_string(capacity_))
        throw system_error(error::invalid_argument,
                           capacity_mismatch_text(kind_, name_, keys_.key, capacity_, *r.capacity));
    co_return r;
}

std::string semaphore_core::failure_text(error_code ec, std::string const& server_text,
                                         lock_options const& opt, bool waited) const {
    auto text = attempt_failure_text(ec, server_text, opt, waited, client_->last_error_text());
    return text.empty() ? ec.message() : with_acl_pointer(std::move(text), kind_);
}

// ------------------------------------------------------------------ waiting calls

void semaphore_core::add_waiter(std::string const& token, waiter& w) {
    waiters_[token] = &w;
    w.listed_as = token;
    if (!routed_) {
        // Listed in the locker's routes while calls wait, subscribed or not: the locker's end
        // and the connection's close end them.
        locker_->routes().add(keys_.channel, weak_from_this());
        routed_ = true;
    }
}

void semaphore_core::remove_waiter(std::string const& token) {
    waiters_.erase(token);
    if (!waiters_.empty() || subscribing_)
        return;
    // Nobody waits: no messages needed until somebody does.
    if (subscribed_)
        locker_->store().unsubscribe(keys_.channel);
    subscribed_ = false;
    if (routed_)
        locker_->routes().remove(keys_.channel, this);
    routed_ = false;
}

asio::awaitable<void> semaphore_core::subscribe(std::shared_ptr<semaphore_core> self) {
    self->subscribing_ = true;
    if (!self->routed_) {
        self->locker_->routes().add(self->keys_.channel, self);
        self->routed_ = true;
    }
    auto const [ec, refusal] = co_await self->locker_->store().subscribe(self->keys_.channel);
    self->subscribing_ = false;
    if (ec) {
        // Refused (an ACL user without the channel): the waiters poll, by their backoff, for as
        // long as this semaphore lives; not reached: asked again by the next waiter.
        self->refused_ = ec == redis::error::server_error;
    } else {
        self->subscribed_ = true;
    }
    if (self->waiters_.empty())
        self->remove_waiter({}); // everybody left meanwhile
}

void semaphore_core::on_message(std::string const& payload) {
    if (!payload.starts_with("g "))
        return;
    auto const it = waiters_.find(payload.substr(2));
    if (it == waiters_.end())
        return;
    it->second->woken = true;
    it->second->timer.cancel();
}

void semaphore_core::on_reconnect() {
    // Messages published while the connection was down were missed: every waiter asks now.
    for (auto& [token, w] : waiters_) {
        w->woken = true;
        w->timer.cancel();
    }
}

void semaphore_core::on_close() {
    // The connection was closed by its user, or the locker is gone: nothing more will come, and
    // a wait would reopen the connection.
    if (subscribed_)
        locker_->store().unsubscribe(keys_.channel);
    subscribed_ = false;
    routed_ = false;
    for (auto& [token, w] : waiters_) {
        w->aborted = true;
        w->timer.cancel();
    }
}

void semaphore_core::close() {
    asio::dispatch(locker_->strand(), [self = shared_from_this()] {
        self->closed_ = true;
        for (auto& [token, w] : self->waiters_) {
            w->aborted = true;
            w->timer.cancel();
        }
    });
}

void semaphore_core::settle(permit_outcome& out, acquisition const& acq,
                            acquisition_action const& done) const {
    auto failure =
        acq.failure(done, link_facts{client_->is_connected(), client_->last_error_text()}, name_);
    out.ec = failure.ec;
    out.message = std::move(failure.message);
}

asio::awaitable<permit_outcome> semaphore_core::acquire(std::shared_ptr<semaphore_core> self,
                                                        std::size_t permits, bool new_fence,
                                                        lock_options opt, bool wait) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    auto& core = *self;
    permit_outcome out;
    acquisition acq(acquisition_terms::permits(opt, core.kind_, wait), clock_type::now());
    waiter w(core, core.locker_->strand());
    std::string token = random_token();
    std::minstd_rand rng(std::random_device{}());
    auto const stopping = [&] { return core.closed_ || w.aborted || cancelled(cs); };
    // The last request's: when it was sent, how long its grant is ours, the server it went to.
    auto sent_at = clock_type::now();
    auto lease_end = sent_at;
    std::uint64_t generation = 0;
    auto next = acq.begin_attempt(stopping());
    while (next.step == acquisition_step::ask) {
        if (wait)
            core.add_waiter(token, w);
        w.woken = false;
        sent_at = clock_type::now();
        lease_end = sent_at + core.locker_->store().safe_ttl(opt.ttl);
        generation = core.client_->server_changes_for(core.keys_.key);
        auto const g =
            co_await core.attempt(token, permits, new_fence, opt.ttl, wait, cs, next.until);
        if (g.stored) {
            out.ec = make_error_code(error::invalid_argument);
            out.message = capacity_mismatch_text(core.kind_, core.name_, core.keys_.key,
                                                 core.capacity_, *g.stored);
            break;
        }
        store_answer answer;
        answer.result = as_grant_result(g);
        answer.lease_end = lease_end;
        answer.server_changed = core.client_->server_changes_for(core.keys_.key) != generation;
        next = acq.on_answer(answer, clock_type::now(), stopping());
        while (next.step == acquisition_step::give_back) {
            if (next.new_token && wait)
                core.waiters_.erase(token);
            core.release_detached(token, permits, true); // its queue entry with it
            if (next.new_token)
                token = random_token(); // a token is granted once
            next = acq.on_given_back(true, clock_type::now(), stopping());
        }
        if (next.step == acquisition_step::wait)
            next = acq.keep_waiting(clock_type::now());
        if (next.step != acquisition_step::wait)
            break;
        if (!core.subscribed_ && !core.refused_ && !core.subscribing_ && !acq.answer().ec) {
            // Subscribe, then ask again at once: a release published before the subscription
            // was confirmed reached nobody.
            co_await subscribe(self);
            next = acq.begin_attempt(stopping());
        } else if (w.woken) {
            next = acq.begin_attempt(stopping()); // told meanwhile: ask now
        } else {
            w.timer.expires_at(acq.wakes_at(clock_type::now(), core.subscribed_, rng));
            co_await w.timer.async_wait(asio::as_tuple(asio::use_awaitable));
            next = acq.on_sleep_end(clock_type::now(), w.woken, stopping());
        }
    }
    if (next.step == acquisition_step::finish && next.end == acquisition_end::acquired) {
        auto st = std::make_shared<permit_state>(self, token, permits, acq.answer().fence, opt,
                                                 sent_at, lease_end, generation);
        st->hold();
        out.state = std::move(st);
    } else if (next.fails()) {
        core.settle(out, acq, next);
    }
    if (wait)
        core.remove_waiter(token);
    if (acq.queued_at_server() && !out.state)
        core.release_detached(token, permits, true); // leaves the queue, passing on a wake
    co_return out;
}

// ------------------------------------------------------------------ a permit's lease

permit_state::permit_state(std::shared_ptr<semaphore_core> core, std::string token,
                           std::size_t permits, std::int64_t fence, lock_options const& opt,
                           clock_type::time_point acquired_at, clock_type::time_point deadline,
                           std::uint64_t server_generation)
    : lease(core->locker().book(),
            lease_terms{opt.ttl, opt.effective_renew_interval(), opt.auto_renew, opt.max_hold},
            acquired_at, deadline, server_generation)
    , core_(std::move(core))
    , token_(std::move(token))
    , permits_(permits)
    , fence_(fence) {}

void permit_state::hold() {
    enter_book();
    start();
}

asio::awaitable<lease_reply> permit_state::extend_at_server(milliseconds ttl) {
    if (!exclusive_in_doubt())
        co_return co_await core_->extend(token_, ttl);
    // A downgrade whose reply was not seen: the renewal asks which it is now.
    auto const r = co_await core_->extend_weighing(token_, ttl);
    if (!r.reply.ec && r.reply.ours) {
        if (r.weighted)
            exclusive_in_doubt_ = false; // the downgrade did not happen: still the writer's
        else
            set_permits(1); // it did: a reader's now, which co_downgrade() turns it into
    }
    co_return r.reply;
}

std::uint64_t permit_state::current_server_generation() const noexcept {
    return core_->client().server_changes_for(core_->keys().key);
}

bool permit_state::is_lease(std::string_view key, std::string_view token) const noexcept {
    return core_->keys().key == key && token_ == token;
}

void permit_state::give_back_now() noexcept {
    try {
        core_->release_detached(token_, permits(), false);
    } catch (...) {
        // Out of memory: the lease runs out by its ttl.
    }
}

void permit_state::on_lost(loss_reason why) {
    auto const& client = core_->client();
    if (!client.logs(log_level::warning))
        return;
    auto const held =
        std::chrono::duration_cast<milliseconds>(clock_type::now() - acquired_at()).count();
    client.log(log_level::warning,
               fmt::format("a holding of {} '{}' ({} permit(s), fence {}) lost after {} ms: {}",
                           core_->kind(), core_->name(), permits(), fence_, held, to_string(why)));
}

void permit_state::on_renewal(clock_type::duration, bool, error_code ec) {
    auto const& client = core_->client();
    if (ec && ec != error::timeout && client.logs(log_level::debug))
        client.log(log_level::debug,
                   fmt::format("renewal of a holding of {} '{}' (fence {}) failed: {}; retrying",
                               core_->kind(), core_->name(), fence_, ec.message()));
}

} // namespace colock::detail
