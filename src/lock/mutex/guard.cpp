// lock_guard: the user's handle on a lease. Its destructor only signals; the release runs in
// the background.
#include "lock/mutex/guard.hpp"

#include "detail/completion.hpp"
#include "detail/spawn.hpp"
#include "lock/base/release_completion.hpp"
#include "lock/core/lease_extension.hpp"
#include "lock/mutex/lock_notes.hpp"
#include "lock/mutex/retention.hpp"

#include <colock/locker.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

namespace detail {

// Coroutines take what they use by value: lambdas with captures that outlive their first
// suspension are a classic source of dangling references.

guard_state::guard_state(std::shared_ptr<guard_owner> owner, std::string name, lock_keys keys,
                         std::string token, std::int64_t fence, lock_options const& opt,
                         lease_origin origin)
    : lease(owner->book(),
            lease_terms{opt.ttl, opt.effective_renew_interval(), opt.auto_renew, opt.max_hold},
            origin.acquired_at, origin.deadline, origin.server_changes)
    , owner_(std::move(owner))
    , name_(std::move(name))
    , keys_(std::move(keys))
    , token_(std::move(token))
    , fence_(fence)
    , opt_(opt)
    , origin_(std::move(origin)) {}

void guard_state::hold() {
    enter_book();
    owner_->keep_record(ttl());
    start();
}

bool guard_state::try_add_hold() noexcept {
    auto n = holds_.load();
    while (n != 0)
        if (holds_.compare_exchange_weak(n, n + 1))
            return true;
    return false;
}

lock_guard guard_access::try_share(std::shared_ptr<guard_state> st) noexcept {
    if (!st || !st->try_add_hold())
        return lock_guard{};
    return lock_guard(std::move(st));
}

asio::awaitable<lease_reply> guard_state::extend_at_server(std::chrono::milliseconds ttl,
                                                           bool renewal) {
    // The key holds the written value with this holder's fence, or the renewal must store it.
    auto known = renewal && opt_.renew_in_batches ? written() : std::nullopt;
    if (known && known->fence < fence_)
        known.reset();
    auto const reply =
        co_await owner_->store().extend(keys_, origin_.lease_token, ttl, fence_, known);
    if (reply.value_changed)
        value_changed_.store(true, std::memory_order_relaxed);
    co_return reply;
}

std::uint64_t guard_state::current_server_generation() const noexcept {
    return owner_->store().server_changes(keys_);
}

bool guard_state::is_lease(std::string_view key, std::string_view token) const noexcept {
    return keys_.key == key && origin_.lease_token == token;
}

void guard_state::give_back_now() noexcept {
    try {
        release_now(shared());
    } catch (...) {
        // Out of memory: the lease runs out by its ttl.
    }
}

void guard_state::on_lost(loss_reason why) {
    owner_->notes().lost(*this, why);
}

void guard_state::on_renewal(clock_type::duration latency, bool extended, error_code ec) {
    owner_->notes().renewal(*this, latency, extended, ec);
    if (ec && ec != error::timeout && owner_->store().logs(log_level::debug))
        owner_->store().log(log_level::debug,
                            fmt::format("renewal of lock '{}' (fence {}) failed: {}; retrying",
                                        name_, fence_, ec.message()));
}

void guard_state::on_confirmed(std::chrono::milliseconds ttl) {
    renewal_confirmed_.store(true, std::memory_order_relaxed);
    owner_->keep_record(ttl);
}

std::optional<held_value> guard_state::written() const noexcept {
    if (!origin_.written || value_changed_.load(std::memory_order_relaxed))
        return std::nullopt;
    auto w = *origin_.written;
    if (renewal_confirmed_.load(std::memory_order_relaxed))
        w.fence = std::max(fence_, w.fence);
    w.until = deadline();
    return w;
}

namespace {

// The lease back to Redis, with the last fence this process gave under it; a waiter here asks
// at once if the lock ends up free rather than handed to another process.
asio::awaitable<std::tuple<error_code, bool>> release_to_server(std::shared_ptr<guard_state> st) {
    auto& locker = st->owner();
    auto const reply = co_await locker.store().release(st->keys(), st->lease_token(),
                                                       handoff_claim(st->options().ttl),
                                                       st->fence(), st->written());
    if (reply.ec || !reply.handed)
        locker.wake_local_head(st->keys());
    if (reply.ec && locker.store().logs(log_level::error))
        locker.store().log(log_level::error,
                           fmt::format("release of lock '{}' (fence {}) failed: {}; the lease "
                                       "ends by its ttl",
                                       st->name(), st->fence(), reply.ec.message()));
    co_return std::tuple{reply.ec, reply.ours};
}

// Hands the release to the store on the caller's thread (see release_in_background).
void send_release(std::shared_ptr<guard_state> st) {
    // The locker (and its store) kept alive through the call, whatever becomes of `st`.
    auto const locker = st->shared_owner();
    auto& store = locker->store();
    auto const& keys = st->keys();
    auto const& token = st->lease_token();
    auto const claim = handoff_claim(st->options().ttl);
    auto const fence = st->fence();
    auto const written = st->written(); // before the lambda takes `st`
    store.release_in_background(keys, token, claim, fence, written, [st = std::move(st)] {
        asio::co_spawn(st->strand(), release_to_server(st), asio::detached);
    });
}

} // namespace

namespace {

// Whether a local taker may come for the lease of `st`: one in the queue, or the next co_lock
// of a kept lease: the strand decides first whether the lease goes to it.
bool local_taker_may_come(guard_state const& st) {
    return st.owner().waiting() > 0 || st.options().retain.count() > 0;
}

} // namespace

asio::awaitable<std::tuple<error_code, bool>> release_held(std::shared_ptr<guard_state> st) {
    st->stop();
    if (st->owner().let_go_locally(*st))
        co_return std::tuple{error_code{}, true};
    co_return co_await release_to_server(std::move(st));
}

// With no waiter in this process (and no retention), the first attempt is handed to the store
// here, on the caller's thread, so that it is queued before anything the caller does next: a
// close() right after still sends it, and nothing reopens the connection later. A passing error
// (a lost connection, BUSY, LOADING) hands the release to the retrying one on the strand. With
// waiters here, or a lease that may be kept, the strand decides first whether the lease goes to
// one of them, or stays.
void release_in_background(std::shared_ptr<guard_state> st) {
    if (local_taker_may_come(*st)) {
        bool const may_keep = st->options().retain.count() > 0;
        if (may_keep)
            st->owner().retained().let_go_pending(st);
        auto strand = st->strand();
        asio::dispatch(strand, [st = std::move(st), may_keep]() mutable {
            if (may_keep && !st->owner().retained().let_go_arrived(*st))
                return; // the connection's close gave the lease back meanwhile
            st->stop();
            if (!st->owner().let_go_locally(*st))
                send_release(std::move(st));
        });
        return;
    }
    release_now(std::move(st));
}

void release_now(std::shared_ptr<guard_state> st) {
    asio::dispatch(st->strand(), [st] {
        st->stop();
        st->owner().notes().released(*st, false, false);
        st->owner().retained().forget(st->keys()); // a lease a guard took from there
    });
    send_release(std::move(st));
}

} // namespace detail

lock_guard::lock_guard() noexcept = default;
lock_guard::lock_guard(std::shared_ptr<detail::guard_state> state) noexcept
    : state_(std::move(state)), holding_(state_ != nullptr) {}
lock_guard::lock_guard(lock_guard&& other) noexcept
    : state_(std::move(other.state_)), holding_(other.holding_.exchange(false)) {}

lock_guard& lock_guard::operator=(lock_guard&& other) noexcept {
    if (this != &other) {
        abandon();
        state_ = std::move(other.state_);
        holding_ = other.holding_.exchange(false);
    }
    return *this;
}

lock_guard::~lock_guard() {
    abandon();
}

bool lock_guard::drop_hold(bool& last) noexcept {
    last = false;
    if (!state_ || !holding_.exchange(false))
        return false;
    last = state_->drop_hold();
    return true;
}

void lock_guard::abandon() noexcept {
    bool last = false;
    drop_hold(last);
    auto st = std::move(state_);
    if (!last || !st->release_once())
        return;
    try {
        detail::release_in_background(std::move(st));
    } catch (...) {
        // Out of memory while posting: the lease runs out by its TTL.
    }
}

lock_guard lock_guard::take_hold() noexcept {
    lock_guard hold;
    if (state_ && holding_.exchange(false)) {
        hold.state_ = state_;
        hold.holding_ = true;
    }
    return hold;
}

std::shared_ptr<detail::guard_state> lock_guard::held_state() const {
    return holding_ ? state_ : nullptr;
}

lock_guard lock_guard::share() const noexcept {
    if (!state_ || !holding_)
        return lock_guard{};
    state_->add_hold();
    return lock_guard(state_);
}

std::size_t lock_guard::hold_count() const noexcept {
    return state_ && holding_ ? state_->holds() : 0;
}

namespace {
std::string const empty_string;
}

std::string const& lock_guard::name() const noexcept {
    return state_ ? state_->name() : empty_string;
}
std::string const& lock_guard::token() const noexcept {
    return state_ ? state_->token() : empty_string;
}
std::int64_t lock_guard::fence() const noexcept {
    return state_ ? state_->fence() : 0;
}
bool lock_guard::owns() const noexcept {
    return state_ && holding_ && !state_->lost() && !state_->released() && state_->running();
}
std::chrono::steady_clock::time_point lock_guard::lease_expiry() const noexcept {
    return state_ ? state_->deadline() : std::chrono::steady_clock::time_point{};
}
std::optional<loss_reason> lock_guard::loss() const noexcept {
    if (!state_)
        return std::nullopt;
    if (auto const why = state_->loss())
        return why;
    if (lost()) // ran out with nobody renewing it
        return loss_reason::expired;
    return std::nullopt;
}

bool lock_guard::lost() const noexcept {
    // Without renewal nobody marks the end of the lease: it is lost when it runs out.
    return state_ && (state_->lost() || (!state_->released() && !state_->running()));
}

void lock_guard::start_wait_lost(
    boost::asio::any_completion_handler<void(boost::system::error_code)> handler) {
    auto st = held_state();
    if (!st) {
        detail::complete_without_io(std::move(handler), make_error_code(error::not_held));
        return;
    }
    st->wait_lost(std::move(handler));
}

asio::awaitable<void> lock_guard::wait_lost() {
    auto [ec] = co_await async_wait_lost(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted)
        throw system_error(ec, "colock: wait_lost");
}

asio::awaitable<bool> lock_guard::extend(std::chrono::milliseconds ttl) {
    auto st = held_state();
    return detail::await_lease_extend(std::move(st), ttl, fmt::format("lock '{}'", name()));
}

using detail::complete_soon;

namespace {

// What a failed release of lock `name` throws (and tells with_diagnostics).
std::string release_failure_text(std::string const& name, error_code ec) {
    return ec == error::timeout
               ? fmt::format("colock: release of lock '{}': the release was not confirmed within "
                             "{} ms; the lease ends by its ttl",
                             name, detail::release_timeout.count())
               : fmt::format("colock: release of lock '{}'", name);
}

} // namespace

void lock_guard::validate_extend(std::chrono::milliseconds ttl) const {
    detail::check_extend_ttl(ttl, fmt::format("lock '{}'", name()));
}

void lock_guard::start_release(lock_guard hold, result_handler handler) {
    auto st = hold.state_;
    bool last = false;
    bool const held = hold.drop_hold(last);
    if (held && !last) { // the lease stays with the guards that share it
        complete_soon(std::move(handler), st->strand().get_inner_executor(), error_code{},
                      !st->lost() && !st->released() && st->running());
        return;
    }
    if (!held || !st->release_once()) {
        auto fallback =
            st ? st->strand().get_inner_executor() : asio::any_io_executor(asio::system_executor());
        complete_soon(std::move(handler), fallback, error_code{}, false);
        return;
    }
    // Formatted only on a failure: a release that succeeds pays no text.
    auto text = [held = st](error_code ec) { return release_failure_text(held->name(), ec); };
    detail::release_and_complete(std::move(st), std::move(handler), std::move(text));
}

void lock_guard::start_extend(std::shared_ptr<detail::guard_state> st,
                              std::chrono::milliseconds ttl, std::string const& name,
                              result_handler handler) {
    auto what = fmt::format("lock '{}'", name);
    detail::start_lease_extend(std::move(st), ttl, std::move(handler), std::move(what));
}

asio::awaitable<bool> lock_guard::release() {
    auto st = state_;
    bool last = false;
    bool const held = drop_hold(last);
    if (held && !last) // the lease stays with the guards that share it
        co_return !st->lost() && !st->released() && st->running();
    if (!held || !st->release_once())
        co_return false;
    if (st->lost()) {
        // Known lost: the answer is false whatever the server says, so do not wait for it
        // (it may be down). The release still goes out in the background, in case the key
        // is still ours there.
        detail::release_in_background(std::move(st));
        co_return false;
    }
    // Its own coroutine on the locker's strand, not reachable by our caller's cancellation:
    // a cancelled caller still gives the lock back.
    auto [ex, result] =
        co_await asio::co_spawn(st->strand(), detail::release_held(st),
                                asio::bind_cancellation_slot(asio::cancellation_slot(),
                                                             asio::as_tuple(asio::use_awaitable)));
    if (ex)
        std::rethrow_exception(ex);
    auto [ec, ours] = result;
    if (ec)
        throw system_error(error_code(ec.value(), ec.category()),
                           release_failure_text(st->name(), ec));
    co_return ours;
}

} // namespace colock
