// A semaphore's requests and its waiting calls: the acquire (one attempt, or a wait in the
// server's queue woken by targeted messages), the release and extension of a holding, and the
// read of the free permits.
#include "lock/semaphore/semaphore_core.hpp"

#include "lock/base/errors.hpp"
#include "lock/base/request_stop.hpp"
#include "lock/base/token.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/core/wake_channel.hpp"

#include <colock/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
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

// A holding's token: its locker's id, by which a status names the holder's process, then 128
// random bits.
std::string holding_token(std::string const& locker_id) {
    return locker_id + "." + random_token();
}

// The locker, once its store is known to serve permits.
locker_context const& serving_permits(locker_context const& l, std::string_view kind,
                                      std::string const& name) {
    l.store().require(holding_kind::permits, kind, name);
    return l;
}

} // namespace

semaphore_core::semaphore_core(std::shared_ptr<locker_context> locker, std::string_view kind,
                               std::string_view kind_prefix, std::string name, std::size_t capacity)
    : locker_(std::move(locker))
    , kind_(kind)
    , name_(std::move(name))
    , capacity_(capacity)
    , keys_(serving_permits(*locker_, kind_, name_).prefix() + std::string(kind_prefix), name_,
            locker_->id(), capacity)
    , wakes_(std::make_shared<wake_channel>(locker_, keys_.channel)) {}

semaphore_core::~semaphore_core() = default;

asio::strand<asio::any_io_executor> const& semaphore_core::locker_strand() const noexcept {
    return locker_->strand();
}

lease_store& semaphore_core::store() const noexcept {
    return locker_->store();
}

// ------------------------------------------------------------------ requests

asio::awaitable<permit_grant> semaphore_core::attempt(permit_request const& request,
                                                      asio::cancellation_state cs,
                                                      clock_type::time_point deadline) {
    request_stop const stop(cs, locker_->strand(), deadline);
    co_return co_await store().grant_permits(keys_, request, stop.slot());
}

asio::awaitable<lease_reply> semaphore_core::extend(std::string const& token, milliseconds ttl) {
    auto const r = co_await store().extend_permits(keys_, token, ttl, false);
    co_return r.reply;
}

asio::awaitable<permit_extension> semaphore_core::extend_weighing(std::string const& token,
                                                                  milliseconds ttl) {
    return store().extend_permits(keys_, token, ttl, true);
}

asio::awaitable<lease_reply> semaphore_core::downgrade(std::string const& token) {
    return store().downgrade_permits(keys_, token);
}

asio::awaitable<lease_reply> semaphore_core::release(std::string const& token, std::size_t permits,
                                                     bool leave) {
    return store().release_permits(keys_, token, permits, leave);
}

void semaphore_core::release_detached(std::string token, std::size_t permits, bool leave) {
    // A passing failure goes on with the retrying release on the strand.
    store().release_permits_in_background(
        keys_, token, permits, leave, [self = shared_from_this(), token, permits, leave] {
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
    auto r = co_await store().read_permits(keys_, 0);
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
    auto text = attempt_failure_text(ec, server_text, opt, waited, store().last_error_text());
    return text.empty() ? ec.message() : with_acl_pointer(std::move(text), kind_);
}

// ------------------------------------------------------------------ waiting calls

void semaphore_core::close() {
    wakes_->close();
}

void semaphore_core::settle(permit_outcome& out, acquisition const& acq,
                            acquisition_action const& done) const {
    auto failure =
        acq.failure(done, link_facts{store().is_connected(), store().last_error_text()}, name_);
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
    auto& wakes = *core.wakes_;
    permit_outcome out;
    auto const call_started = clock_type::now();
    acquisition acq(acquisition_terms::permits(opt, core.kind_, wait), call_started);
    wake_channel::waiter w(wakes);
    std::string token = holding_token(core.locker_->id());
    std::minstd_rand rng(std::random_device{}());
    auto const stopping = [&] { return wakes.closed() || w.aborted || cancelled(cs); };
    // The last request's: when it was sent, how long its grant is ours, the server it went to.
    auto sent_at = clock_type::now();
    auto lease_end = sent_at;
    std::uint64_t generation = 0;
    auto next = acq.begin_attempt(stopping());
    while (next.step == acquisition_step::ask) {
        if (wait)
            wakes.add(token, w);
        w.woken = false;
        sent_at = clock_type::now();
        lease_end = sent_at + core.store().safe_ttl(opt.ttl);
        generation = core.store().permit_server_changes(core.keys_);
        permit_request const request{token, permits,  core.capacity_, opt.ttl, core.locker_->id(),
                                     wait,  new_fence};
        auto const g = co_await core.attempt(request, cs, next.until);
        if (g.stored) {
            out.ec = make_error_code(error::invalid_argument);
            out.message = capacity_mismatch_text(core.kind_, core.name_, core.keys_.key,
                                                 core.capacity_, *g.stored);
            break;
        }
        store_answer answer;
        answer.result = as_grant_result(g);
        answer.lease_end = lease_end;
        answer.server_changed = core.store().permit_server_changes(core.keys_) != generation;
        next = acq.on_answer(answer, clock_type::now(), stopping());
        while (next.step == acquisition_step::give_back) {
            if (next.new_token && wait)
                wakes.unlist(token);
            core.release_detached(token, permits, true); // its queue entry with it
            if (next.new_token)
                token = holding_token(core.locker_->id()); // a token is granted once
            next = acq.on_given_back(true, clock_type::now(), stopping());
        }
        if (next.step == acquisition_step::wait)
            next = acq.keep_waiting(clock_type::now());
        if (next.step != acquisition_step::wait)
            break;
        if (wakes.wants_subscription() && !acq.answer().ec) {
            // Subscribe, then ask again at once: a release published before the subscription
            // was confirmed reached nobody.
            co_await wake_channel::subscribe(core.wakes_);
            next = acq.begin_attempt(stopping());
        } else if (w.woken) {
            next = acq.begin_attempt(stopping()); // told meanwhile: ask now
        } else {
            w.timer.expires_at(acq.wakes_at(clock_type::now(), wakes.subscribed(), rng));
            co_await w.timer.async_wait(asio::as_tuple(asio::use_awaitable));
            next = acq.on_sleep_end(clock_type::now(), w.woken, stopping());
        }
    }
    if (next.step == acquisition_step::finish && next.end == acquisition_end::acquired) {
        auto st = std::make_shared<permit_state>(self, token, permits, acq.answer().fence, opt,
                                                 sent_at, lease_end, generation);
        st->hold();
        if (auto* o = core.locker().observer())
            o->on_acquired(
                {core.name_, st->fence(), clock_type::now() - call_started, acq.attempts(),
                 acq.attempts() > 1 ? acquired_by::server_after_wait : acquired_by::first_attempt,
                 st->kind()});
        out.state = std::move(st);
    } else if (next.fails()) {
        core.settle(out, acq, next);
    }
    if (wait)
        wakes.remove(token);
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
    // Status names the holder by its locker's record; a forced release tells it there.
    core_->locker().keep_holder_record(ttl());
    start();
}

asio::awaitable<lease_reply> permit_state::extend_at_server(milliseconds ttl, bool /*renewal*/) {
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
    return core_->store().permit_server_changes(core_->keys());
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

std::string_view permit_state::kind() const noexcept {
    return core_->kind();
}

void permit_state::note_released() const {
    if (auto* o = core_->locker().observer(); o && !lost())
        o->on_released(
            {core_->name(), fence_, clock_type::now() - acquired_at(), false, false, kind()});
}

void permit_state::on_lost(loss_reason why) {
    if (auto* o = core_->locker().observer())
        o->on_lost({core_->name(), fence_, why, clock_type::now() - acquired_at(), kind()});
    auto const& store = core_->store();
    if (!store.logs(log_level::warning))
        return;
    auto const held =
        std::chrono::duration_cast<milliseconds>(clock_type::now() - acquired_at()).count();
    store.log(log_level::warning,
              fmt::format("a holding of {} '{}' ({} permit(s), fence {}) lost after {} ms: {}",
                          core_->kind(), core_->name(), permits(), fence_, held, to_string(why)));
}

void permit_state::on_renewal(clock_type::duration latency, bool extended, error_code ec) {
    if (extended)
        core_->locker().keep_holder_record(ttl());
    if (auto* o = core_->locker().observer())
        o->on_renewal({core_->name(), fence_, latency, extended, ec, kind()});
    auto const& store = core_->store();
    if (ec && ec != error::timeout && store.logs(log_level::debug))
        store.log(log_level::debug,
                  fmt::format("renewal of a holding of {} '{}' (fence {}) failed: {}; retrying",
                              core_->kind(), core_->name(), fence_, ec.message()));
}

} // namespace colock::detail
