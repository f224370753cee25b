// What a permit and a read-write lock's guards share: the handle on a holding's lease, its
// release (awaited, or in the background when it is let go), and the awaitable acquire.
#include "detail/completion.hpp"
#include "lock/base/errors.hpp"
#include "lock/base/release_completion.hpp"
#include "lock/core/lease_extension.hpp"
#include "lock/semaphore/semaphore_core.hpp"

#include <colock/lease_guard.hpp>
#include <colock/redis/connection.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <tuple>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

namespace detail {

// Static rather than in an unnamed namespace: release_and_complete finds these two by
// argument-dependent lookup, which does not look into an unnamed namespace.

// Stops the renewal, then gives the holding back in the background; the extend script never
// revives a holding that is gone, so a renewal behind the release cannot either.
static void release_in_background(std::shared_ptr<permit_state> st) {
    asio::dispatch(st->strand(), [st] {
        st->stop();
        st->note_released();
    });
    st->core().release_detached(st->token(), st->permits(), false);
}

static asio::awaitable<std::tuple<error_code, bool>>
release_held(std::shared_ptr<permit_state> st) {
    st->stop();
    st->note_released();
    auto const reply = co_await st->core().release(st->token(), st->permits(), false);
    co_return std::tuple{reply.ec, reply.ours};
}

namespace {

// Lets go of `st` in the background, if this is the first to let go of it.
void let_go(std::shared_ptr<permit_state> st) noexcept {
    if (!st || !st->release_once())
        return;
    try {
        release_in_background(std::move(st));
    } catch (...) {
        // Out of memory while posting: the lease runs out by its ttl.
    }
}

std::string const empty_string;

} // namespace

asio::awaitable<permit_outcome> await_acquire(std::shared_ptr<semaphore_core> core,
                                              std::size_t permits, bool new_fence, lock_options opt,
                                              bool wait) {
    auto strand = core->locker_strand();
    auto initiation = [strand,
                       op = semaphore_core::acquire(std::move(core), permits, new_fence,
                                                    std::move(opt), wait)](auto handler) mutable {
        spawn_cancellable(
            strand, std::move(op), std::move(handler),
            [](auto h, std::exception_ptr e, permit_outcome o) { std::move(h)(e, std::move(o)); });
    };
    auto [e, out] = co_await asio::async_initiate<decltype(nothrow_awaitable) const,
                                                  void(std::exception_ptr, permit_outcome)>(
        std::move(initiation), nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    if (out.ec) {
        // As the lock's (awaited_call.hpp): a connection never established throws
        // redis::connect_error, whose what() is the message alone, which names the cause.
        if (is_connect_failure(out.ec))
            throw redis::connect_error(out.ec, out.message);
        throw system_error(out.ec, out.message);
    }
    co_return std::move(out);
}

} // namespace detail

namespace {

std::string holding_text(detail::permit_state const* st, std::string const& name) {
    return st ? fmt::format("{} '{}'", st->core().kind(), name)
              : std::string("a guard that holds nothing");
}

// What a failed release of `what` throws (and tells with_diagnostics).
std::string release_failure_text(std::string const& what, error_code ec) {
    return ec == error::timeout ? fmt::format("colock: release of {}: not confirmed within {} ms; "
                                              "the lease ends by its ttl",
                                              what, detail::release_timeout.count())
                                : fmt::format("colock: release of {}", what);
}

} // namespace

lease_guard::lease_guard() noexcept = default;
lease_guard::lease_guard(std::shared_ptr<detail::permit_state> state) noexcept
    : state_(std::move(state)) {}
lease_guard::lease_guard(lease_guard&& other) noexcept = default;

lease_guard& lease_guard::operator=(lease_guard&& other) noexcept {
    if (this != &other) {
        detail::let_go(std::exchange(state_, nullptr));
        state_ = std::move(other.state_);
    }
    return *this;
}

lease_guard::~lease_guard() {
    detail::let_go(std::move(state_));
}

std::string const& lease_guard::name() const noexcept {
    return state_ ? state_->core().name() : detail::empty_string;
}
std::string const& lease_guard::token() const noexcept {
    return state_ ? state_->token() : detail::empty_string;
}
std::int64_t lease_guard::fence() const noexcept {
    return state_ ? state_->fence() : 0;
}
bool lease_guard::owns() const noexcept {
    return state_ && !state_->lost() && !state_->released() && state_->running();
}
bool lease_guard::lost() const noexcept {
    // Without renewal nobody marks the end of the lease: it is lost when it runs out.
    return state_ && (state_->lost() || (!state_->released() && !state_->running()));
}
std::optional<loss_reason> lease_guard::loss() const noexcept {
    if (!state_)
        return std::nullopt;
    if (auto const why = state_->loss())
        return why;
    if (lost())
        return loss_reason::expired;
    return std::nullopt;
}
std::chrono::steady_clock::time_point lease_guard::lease_expiry() const noexcept {
    return state_ ? state_->deadline() : std::chrono::steady_clock::time_point{};
}

void lease_guard::start_wait_lost(std::shared_ptr<detail::permit_state> st,
                                  asio::any_completion_handler<void(error_code)> handler) {
    if (!st || st->released()) {
        detail::complete_without_io(std::move(handler), make_error_code(error::not_held));
        return;
    }
    st->wait_lost(std::move(handler));
}

asio::awaitable<void> lease_guard::wait_lost() {
    auto [ec] = co_await async_wait_lost(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted)
        throw system_error(ec, "colock: wait_lost");
}

void lease_guard::start_release(std::shared_ptr<detail::permit_state> st, release_handler handler) {
    if (!st || !st->release_once()) {
        auto fallback =
            st ? st->strand().get_inner_executor() : asio::any_io_executor(asio::system_executor());
        detail::complete_soon(std::move(handler), fallback, error_code{}, false);
        return;
    }
    // Formatted only on a failure: a release that succeeds pays no text.
    auto text = [held = st](error_code ec) {
        return release_failure_text(holding_text(held.get(), held->core().name()), ec);
    };
    detail::release_and_complete(std::move(st), std::move(handler), std::move(text));
}

asio::awaitable<bool> lease_guard::release() {
    auto st = state_; // kept: name() and fence() still answer once let go
    auto [ec, ours] = co_await asio::async_initiate<decltype(detail::nothrow_awaitable) const,
                                                    void(error_code, bool)>(
        [](auto handler, std::shared_ptr<detail::permit_state> held) {
            start_release(std::move(held), std::move(handler));
        },
        detail::nothrow_awaitable, std::move(st));
    if (ec)
        throw system_error(ec, release_failure_text(holding_text(state_.get(), name()), ec));
    co_return ours;
}

void lease_guard::validate_extend(std::chrono::milliseconds ttl) const {
    detail::check_extend_ttl(ttl, holding_text(state_.get(), name()));
}

void lease_guard::start_extend(std::shared_ptr<detail::permit_state> st,
                               std::chrono::milliseconds ttl, release_handler handler) {
    auto what = holding_text(st.get(), st ? st->core().name() : std::string());
    detail::start_lease_extend(std::move(st), ttl, std::move(handler), std::move(what));
}

asio::awaitable<bool> lease_guard::extend(std::chrono::milliseconds ttl) {
    return detail::await_lease_extend(state_, ttl, holding_text(state_.get(), name()));
}

} // namespace colock
