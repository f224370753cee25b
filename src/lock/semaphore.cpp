// The semaphore's public face: construction, the acquire calls with their arguments checked at
// the call, the permit handle and its release. The waiting and the requests are in
// semaphore_core.cpp.
#include "semaphore_core.hpp"

#include "../detail/completion.hpp"
#include "../detail/spawn.hpp"
#include "locker_access.hpp"
#include "locker_impl.hpp"

#include <colock/semaphore.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

namespace detail {

namespace {

// Stops the renewal, then gives the permits back in the background; the extend script never
// revives a holding that is gone, so a renewal behind the release cannot either.
void release_in_background(std::shared_ptr<permit_state> st) {
    asio::dispatch(st->strand(), [st] { st->stop(); });
    st->core().release_detached(st->token(), st->permits(), false);
}

asio::awaitable<std::tuple<error_code, bool>> release_held(std::shared_ptr<permit_state> st) {
    st->stop();
    auto const reply = co_await st->core().release(st->token(), st->permits(), false);
    co_return std::tuple{reply.ec, reply.ours};
}

// Completes an operation decided at its initiation: never inside the initiating call.
template <class Handler, class Executor, class... Args>
void complete_soon(Handler handler, Executor const& fallback, Args... args) {
    post_completion(fallback, std::move(handler), asio::cancellation_slot(), std::move(args)...);
}

std::string const empty_string;

// Runs an acquire for an awaiting caller, whose cancellation reaches it on the strand.
asio::awaitable<permit_outcome> await_acquire(std::shared_ptr<semaphore_core> core,
                                              std::size_t permits, lock_options opt, bool wait) {
    auto strand = core->locker().strand();
    auto initiation = [strand,
                       op = semaphore_core::acquire(std::move(core), permits, std::move(opt),
                                                    wait)](auto handler) mutable {
        spawn_cancellable(
            strand, std::move(op), std::move(handler),
            [](auto h, std::exception_ptr e, permit_outcome o) { std::move(h)(e, std::move(o)); });
    };
    auto [e, out] = co_await asio::async_initiate<decltype(nothrow_awaitable) const,
                                                  void(std::exception_ptr, permit_outcome)>(
        std::move(initiation), nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    if (out.ec)
        throw system_error(out.ec, out.message);
    co_return std::move(out);
}

} // namespace

} // namespace detail

// ---------------------------------------------------------------------- permit

permit::permit() noexcept = default;
permit::permit(std::shared_ptr<detail::permit_state> state) noexcept : state_(std::move(state)) {}
permit::permit(permit&& other) noexcept = default;

permit& permit::operator=(permit&& other) noexcept {
    if (this != &other) {
        if (auto st = std::exchange(state_, nullptr); st && st->release_once()) {
            try {
                detail::release_in_background(std::move(st));
            } catch (...) {
                // Out of memory while posting: the lease runs out by its ttl.
            }
        }
        state_ = std::move(other.state_);
    }
    return *this;
}

permit::~permit() {
    if (state_ && state_->release_once()) {
        try {
            detail::release_in_background(std::move(state_));
        } catch (...) {
            // Out of memory while posting: the lease runs out by its ttl.
        }
    }
}

std::string const& permit::name() const noexcept {
    return state_ ? state_->core().name() : detail::empty_string;
}
std::string const& permit::token() const noexcept {
    return state_ ? state_->token() : detail::empty_string;
}
std::int64_t permit::fence() const noexcept {
    return state_ ? state_->fence() : 0;
}
std::size_t permit::count() const noexcept {
    return state_ ? state_->permits() : 0;
}
bool permit::owns() const noexcept {
    return state_ && !state_->lost() && !state_->released() && state_->running();
}
bool permit::lost() const noexcept {
    return state_ && (state_->lost() || (!state_->released() && !state_->running()));
}
std::optional<loss_reason> permit::loss() const noexcept {
    if (!state_)
        return std::nullopt;
    if (auto const why = state_->loss())
        return why;
    if (lost())
        return loss_reason::expired;
    return std::nullopt;
}
std::chrono::steady_clock::time_point permit::lease_expiry() const noexcept {
    return state_ ? state_->deadline() : std::chrono::steady_clock::time_point{};
}

void permit::start_wait_lost(
    std::shared_ptr<detail::permit_state> st,
    asio::any_completion_handler<void(boost::system::error_code)> handler) {
    if (!st || st->released()) {
        auto ex = asio::get_associated_executor(handler);
        asio::dispatch(ex, [h = std::move(handler)]() mutable {
            std::move(h)(make_error_code(error::not_held));
        });
        return;
    }
    st->wait_lost(std::move(handler));
}

asio::awaitable<void> permit::wait_lost() {
    auto [ec] = co_await async_wait_lost(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted)
        throw system_error(ec, "colock: wait_lost of a permit");
}

void permit::start_release(std::shared_ptr<detail::permit_state> st, release_handler handler) {
    if (!st || !st->release_once()) {
        auto fallback =
            st ? st->strand().get_inner_executor() : asio::any_io_executor(asio::system_executor());
        detail::complete_soon(std::move(handler), fallback, error_code{}, false);
        return;
    }
    auto const io_executor = st->strand().get_inner_executor();
    if (st->lost()) {
        // Known lost: false whatever the server says; the release still goes out, in case the
        // holding is still there.
        detail::release_in_background(std::move(st));
        detail::complete_soon(std::move(handler), io_executor, error_code{}, false);
        return;
    }
    auto strand = st->strand();
    asio::co_spawn(strand, detail::release_held(std::move(st)),
                   asio::bind_cancellation_slot(
                       asio::cancellation_slot(),
                       [handler = std::move(handler),
                        io_executor](std::exception_ptr e, std::tuple<error_code, bool> r) mutable {
                           auto [ec, ours] = r;
                           if (e)
                               ec = error::unexpected_reply;
                           detail::complete_soon(std::move(handler), io_executor,
                                                 error_code(ec.value(), ec.category()), ours);
                       }));
}

asio::awaitable<bool> permit::release() {
    std::string const name = this->name();
    auto [ec, ours] = co_await async_release(asio::as_tuple(asio::use_awaitable));
    if (ec)
        throw system_error(ec, ec == error::timeout
                                   ? fmt::format("colock: release of semaphore '{}': not "
                                                 "confirmed within {} ms; the lease ends by its "
                                                 "ttl",
                                                 name, detail::release_timeout.count())
                                   : fmt::format("colock: release of semaphore '{}'", name));
    co_return ours;
}

// ---------------------------------------------------------------------- semaphore

semaphore::semaphore(locker& l, std::string name, std::size_t capacity) {
    detail::validate_semaphore(name, capacity);
    core_ = std::make_shared<detail::semaphore_core>(detail::locker_access::impl(l),
                                                     std::move(name), capacity);
}

semaphore::semaphore(semaphore&& other) noexcept = default;

semaphore& semaphore::operator=(semaphore&& other) noexcept {
    if (this != &other) {
        if (core_)
            core_->close();
        core_ = std::move(other.core_);
    }
    return *this;
}

semaphore::~semaphore() {
    if (core_)
        core_->close();
}

std::string const& semaphore::name() const noexcept {
    return core_ ? core_->name() : detail::empty_string;
}

std::size_t semaphore::capacity() const noexcept {
    return core_ ? core_->capacity() : 0;
}

void semaphore::check(std::size_t permits, lock_options const& opt) const {
    if (!core_)
        throw system_error(error::invalid_argument, "colock: a moved-from semaphore");
    validate(core_->name(), opt);
    detail::validate_permits(core_->name(), core_->capacity(), permits);
}

void semaphore::start_acquire(std::shared_ptr<detail::semaphore_core> core, std::size_t permits,
                              lock_options opt, acquire_handler handler) {
    auto strand = core->locker().strand();
    detail::spawn_cancellable(
        strand, detail::semaphore_core::acquire(std::move(core), permits, std::move(opt), true),
        std::move(handler), [](acquire_handler h, std::exception_ptr e, detail::permit_outcome o) {
            if (e)
                o.ec = error::unexpected_reply;
            std::move(h)(o.ec, permit(std::move(o.state)));
        });
}

void semaphore::start_try_acquire(std::shared_ptr<detail::semaphore_core> core, std::size_t permits,
                                  lock_options opt, try_acquire_handler handler) {
    auto strand = core->locker().strand();
    detail::spawn_cancellable(
        strand, detail::semaphore_core::acquire(std::move(core), permits, std::move(opt), false),
        std::move(handler),
        [](try_acquire_handler h, std::exception_ptr e, detail::permit_outcome o) {
            if (e)
                o.ec = error::unexpected_reply;
            std::optional<permit> p;
            if (o.state)
                p.emplace(permit(std::move(o.state)));
            std::move(h)(o.ec, std::move(p));
        });
}

asio::awaitable<permit> semaphore::co_acquire(lock_options opt) {
    return co_acquire(1, std::move(opt));
}

asio::awaitable<permit> semaphore::co_acquire(std::size_t permits, lock_options opt) {
    check(permits, opt);
    auto out = co_await detail::await_acquire(core_, permits, std::move(opt), true);
    co_return permit(std::move(out.state));
}

asio::awaitable<std::optional<permit>> semaphore::co_try_acquire(lock_options opt) {
    return co_try_acquire(1, std::move(opt));
}

asio::awaitable<std::optional<permit>> semaphore::co_try_acquire(std::size_t permits,
                                                                 lock_options opt) {
    check(permits, opt);
    auto out = co_await detail::await_acquire(core_, permits, std::move(opt), false);
    if (!out.state)
        co_return std::nullopt;
    co_return permit(std::move(out.state));
}

asio::awaitable<std::size_t> semaphore::co_available() {
    if (!core_)
        throw system_error(error::invalid_argument, "colock: a moved-from semaphore");
    auto core = core_;
    auto strand = core->locker().strand();
    auto initiation = [strand, op = core->read()](auto handler) mutable {
        detail::spawn_cancellable(strand, std::move(op), std::move(handler),
                                  [](auto h, std::exception_ptr e, detail::semaphore_reading r) {
                                      std::move(h)(e, std::move(r));
                                  });
    };
    auto [e, reading] =
        co_await asio::async_initiate<decltype(detail::nothrow_awaitable) const,
                                      void(std::exception_ptr, detail::semaphore_reading)>(
            std::move(initiation), detail::nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    auto const held = static_cast<std::size_t>(reading.held);
    co_return held >= core->capacity() ? 0 : core->capacity() - held;
}

} // namespace colock
