// The guard of a lock set, and the locker's calls that take one.
#include "detail/completion.hpp"
#include "lock/base/errors.hpp"
#include "lock/base/release_completion.hpp"
#include "lock/multi/lock_set.hpp"

#include <colock/locker.hpp>
#include <colock/multi_lock_guard.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

namespace detail {

// Static rather than in an unnamed namespace: release_and_complete finds these two by
// argument-dependent lookup. Renewal stops before the release is sent, so it cannot revive a
// name given back. With a call of this process waiting for the same names, the strand decides
// first whether the lease goes to it; else the release is handed to the connection here, on
// the caller's thread, so that a close() right after still sends it.
static void release_part_in_background(std::shared_ptr<lock_set_state> st) {
    if (st->local_taker_may_come()) {
        auto strand = st->strand();
        asio::dispatch(strand, [st = std::move(st)] { st->let_go_on_strand(); });
        return;
    }
    asio::dispatch(st->strand(), [st] { st->stop(); });
    st->release_detached();
    asio::dispatch(st->strand(), [st] { st->after_release(); });
}

// `st` is marked let go already; the other parts of a set over several slots are marked here.
static void release_in_background(std::shared_ptr<lock_set_state> st) {
    for (auto& part : st->parts())
        if (part == st || part->release_once())
            release_part_in_background(std::move(part));
}

static asio::awaitable<std::tuple<error_code, bool>>
release_held(std::shared_ptr<lock_set_state> st) {
    error_code first_error;
    bool every = true;
    for (auto& part : st->parts()) {
        if (part != st && !part->release_once())
            continue;
        part->stop();
        if (part->hand_off_locally())
            continue;
        auto const reply = co_await part->release();
        part->after_release();
        if (reply.ec && !first_error)
            first_error = reply.ec;
        every = every && reply.ours;
    }
    co_return std::tuple{first_error, every && !first_error};
}

namespace {

void let_go(std::shared_ptr<lock_set_state> st) noexcept {
    if (!st || !st->release_once())
        return;
    try {
        release_in_background(std::move(st));
    } catch (...) {
        // Out of memory while posting: the lease runs out by its ttl.
    }
}

std::vector<std::string> const no_names;
std::vector<std::int64_t> const no_fences;
std::string const empty_string;

} // namespace

} // namespace detail

multi_lock_guard::multi_lock_guard() noexcept = default;
multi_lock_guard::multi_lock_guard(std::shared_ptr<detail::lock_set_state> state) noexcept
    : state_(std::move(state)) {}
multi_lock_guard::multi_lock_guard(multi_lock_guard&& other) noexcept = default;

multi_lock_guard& multi_lock_guard::operator=(multi_lock_guard&& other) noexcept {
    if (this != &other) {
        detail::let_go(std::exchange(state_, nullptr));
        state_ = std::move(other.state_);
    }
    return *this;
}

multi_lock_guard::~multi_lock_guard() {
    detail::let_go(std::move(state_));
}

std::vector<std::string> const& multi_lock_guard::names() const noexcept {
    return state_ ? state_->names() : detail::no_names;
}
std::vector<std::int64_t> const& multi_lock_guard::fences() const noexcept {
    return state_ ? state_->fences() : detail::no_fences;
}
std::int64_t multi_lock_guard::fence(std::string_view name) const {
    auto const& all = names();
    auto const it = std::lower_bound(all.begin(), all.end(), name);
    if (it == all.end() || *it != name)
        throw system_error(error::invalid_argument,
                           fmt::format("colock: fence of '{}': the {} '{}' does not hold it", name,
                                       detail::lock_set_kind, detail::shown_names(all)));
    return fences()[static_cast<std::size_t>(it - all.begin())];
}
std::string const& multi_lock_guard::token() const noexcept {
    return state_ ? state_->token() : detail::empty_string;
}
bool multi_lock_guard::owns() const noexcept {
    return state_ && !state_->lost() && !state_->released() &&
           detail::clock_type::now() < state_->earliest_deadline();
}
bool multi_lock_guard::lost() const noexcept {
    // Without renewal nobody marks the end of the lease: it is lost when it runs out.
    return state_ && (state_->lost() || (!state_->released() &&
                                         detail::clock_type::now() >= state_->earliest_deadline()));
}
std::optional<loss_reason> multi_lock_guard::loss() const noexcept {
    if (!state_)
        return std::nullopt;
    if (auto const why = state_->loss())
        return why;
    if (lost())
        return loss_reason::expired;
    return std::nullopt;
}
std::chrono::steady_clock::time_point multi_lock_guard::lease_expiry() const noexcept {
    return state_ ? state_->earliest_deadline() : std::chrono::steady_clock::time_point{};
}

void multi_lock_guard::start_wait_lost(std::shared_ptr<detail::lock_set_state> st,
                                       asio::any_completion_handler<void(error_code)> handler) {
    if (!st || st->released()) {
        detail::complete_without_io(std::move(handler), make_error_code(error::not_held));
        return;
    }
    st->wait_lost(std::move(handler));
}

asio::awaitable<void> multi_lock_guard::wait_lost() {
    auto [ec] = co_await async_wait_lost(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted)
        throw system_error(ec, "colock: wait_lost");
}

namespace {

std::string set_text(detail::lock_set_state const* st) {
    return st ? fmt::format("{} '{}'", detail::lock_set_kind, detail::shown_names(st->names()))
              : std::string("a guard that holds nothing");
}

// What a failed release of the set `what` throws (and tells with_diagnostics).
std::string release_failure_text(std::string const& what, error_code ec) {
    return ec == error::timeout ? fmt::format("colock: release of {}: not confirmed within {} ms; "
                                              "the leases end by their ttl",
                                              what, detail::release_timeout.count())
                                : fmt::format("colock: release of {}", what);
}

} // namespace

void multi_lock_guard::start_release(std::shared_ptr<detail::lock_set_state> st,
                                     release_handler handler) {
    if (!st || !st->release_once()) {
        auto fallback =
            st ? st->strand().get_inner_executor() : asio::any_io_executor(asio::system_executor());
        detail::complete_soon(std::move(handler), fallback, error_code{}, false);
        return;
    }
    // Formatted only on a failure: a release that succeeds pays no text.
    auto text = [held = st](error_code ec) {
        return release_failure_text(set_text(held.get()), ec);
    };
    detail::release_and_complete(std::move(st), std::move(handler), std::move(text));
}

asio::awaitable<bool> multi_lock_guard::release() {
    auto const held = state_; // names the set on a failure
    auto [ec, ours] = co_await async_release(detail::nothrow_awaitable);
    if (ec)
        throw system_error(ec, release_failure_text(set_text(held.get()), ec));
    co_return ours;
}

// ---------------------------------------------------------------------- the locker's calls

void locker::validate_all(std::vector<std::string> const& names, lock_options const& opt) {
    if (names.empty())
        throw system_error(error::invalid_argument,
                           "colock: lock on several names: the set of names is empty");
    for (auto const& n : names)
        validate(n, opt);
}

void locker::start_lock_all(std::vector<std::string> names, lock_options opt,
                            lock_all_handler handler) {
    detail::spawn_lock_set(detail::context_of(*this), std::move(names), std::move(opt), true,
                           std::move(handler),
                           [](lock_all_handler h, error_code ec, detail::lock_set_outcome o) {
                               std::move(h)(ec, multi_lock_guard(std::move(o.state)));
                           });
}

void locker::start_try_lock_all(std::vector<std::string> names, lock_options opt,
                                try_lock_all_handler handler) {
    detail::spawn_lock_set(detail::context_of(*this), std::move(names), std::move(opt), false,
                           std::move(handler),
                           [](try_lock_all_handler h, error_code ec, detail::lock_set_outcome o) {
                               std::optional<multi_lock_guard> g;
                               if (o.state)
                                   g.emplace(multi_lock_guard(std::move(o.state)));
                               std::move(h)(ec, std::move(g));
                           });
}

asio::awaitable<multi_lock_guard> locker::co_lock_all(std::vector<std::string> names,
                                                      lock_options opt) {
    validate_all(names, opt);
    auto out = co_await detail::await_lock_set(detail::context_of(*this), std::move(names),
                                               std::move(opt), true);
    co_return multi_lock_guard(std::move(out.state));
}

asio::awaitable<std::optional<multi_lock_guard>>
locker::co_try_lock_all(std::vector<std::string> names, lock_options opt) {
    validate_all(names, opt);
    auto out = co_await detail::await_lock_set(detail::context_of(*this), std::move(names),
                                               std::move(opt), false);
    if (!out.state)
        co_return std::nullopt;
    co_return multi_lock_guard(std::move(out.state));
}

} // namespace colock
