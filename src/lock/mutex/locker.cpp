// The locker's public face: construction on a store, the co_lock / co_try_lock calls with their
// options checked at the call, and their completion. The orchestration is in lock_calls.cpp and
// queue_wait.cpp.
#include "lock/mutex/locker_access.hpp"
#include "lock/mutex/locker_impl.hpp"

#include "detail/failure_report.hpp"
#include "lock/base/awaited_call.hpp"
#include "lock/base/errors.hpp"
#include "lock/base/token.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/quorum/quorum_store.hpp"
#include "lock/store/single_connection_store.hpp"

#include <colock/locker.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock {

namespace asio = boost::asio;

namespace detail {

std::shared_ptr<locker_impl> locker_access::make_impl(std::shared_ptr<lease_store> store,
                                                      std::string prefix, std::string client_name) {
    validate_key_prefix(prefix);
    return std::make_shared<locker_impl>(std::move(store), std::move(prefix),
                                         std::move(client_name));
}

std::shared_ptr<locker_context> context_of(locker const& l) {
    return locker_access::impl(l);
}

locker locker_access::make(std::shared_ptr<lease_store> store, std::string prefix,
                           std::string client_name) {
    return locker(make_impl(std::move(store), std::move(prefix), std::move(client_name)));
}

} // namespace detail

// -------------------------------------------------------------------- locker

locker::locker(redis::connection& conn, std::string key_prefix)
    : locker(detail::locker_access::make_impl(detail::make_single_connection_store(conn),
                                              std::move(key_prefix),
                                              conn.get_config().client_name)) {}

locker::locker(std::span<redis::connection* const> primaries, std::string key_prefix)
    : locker(detail::locker_access::make_impl(
          detail::make_quorum_store(primaries), std::move(key_prefix),
          primaries.empty() || !primaries[0] ? std::string()
                                             : primaries[0]->get_config().client_name)) {}

locker::locker(std::shared_ptr<detail::locker_impl> impl) : impl_(std::move(impl)) {
    impl_->open();
}

locker::~locker() {
    impl_->close();
}

locker::executor_type locker::get_executor() const noexcept {
    return impl_->strand().get_inner_executor();
}

std::string const& locker::key_prefix() const noexcept {
    return impl_->prefix();
}

std::size_t locker::waiting() const noexcept {
    return impl_->waiting();
}

void locker::set_observer(std::shared_ptr<lock_observer> observer) {
    impl_->set_observer(std::move(observer));
}

std::string const& locker::id() const noexcept {
    return impl_->id();
}

namespace {

using outcome_type = detail::lock_outcome;

// Starts a call whose handler `finish(handler, exception, outcome)` completes. The caller's
// cancellation goes to the strand, and to the call only while it has not finished (the slot
// holds the call weakly: a call that is done is not kept alive by its caller's slot).
template <class Handler, class Finish>
void start_operation(std::shared_ptr<detail::locker_impl> const& impl, detail::key_space space,
                     std::string name, lock_options opt, bool wait, Handler handler,
                     Finish finish) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto calls = impl->calls();
    auto op = std::make_shared<detail::lock_operation_for<Handler, Finish>>(
        calls, std::move(space), std::move(name), std::move(opt), wait, std::move(handler),
        std::move(finish));
    if (slot.is_connected()) {
        // Installed here, on the caller's thread, where the caller emits.
        slot.assign(
            [weak = std::weak_ptr<detail::lock_operation>(op)](asio::cancellation_type type) {
                if (auto target = weak.lock()) {
                    auto const& strand = target->calls().strand();
                    asio::dispatch(strand, [target = std::move(target), type] {
                        target->calls().cancel(*target, type);
                    });
                }
            });
    }
    calls->start(std::move(op));
}

// co_lock and co_try_lock are not coroutines of their own: each is asio's awaitable of one
// initiation, so a waiting call costs the caller's frame, that awaitable's and its
// lock_operation (100,000 waiters: 1.9 KB each, with 1.5 KB of it the callers' own coroutines).
// The arguments are checked when the call is awaited, as a coroutine's would be; a refusal, or
// an outcome with an error, is the exception of the awaited operation, whose message names the
// lock. `finish(outcome)` makes the result of a good outcome. `impl` is a raw pointer: the
// caller's locker outlives the operation, as it does any of its operations.
template <class Result, class Finish>
auto await_lock(detail::locker_impl* impl, detail::key_space space, std::string name,
                lock_options opt, bool wait, Finish finish) {
    // The arguments travel on the heap until the call starts, not as the initiation's
    // arguments: asio's awaitable keeps those in its frame for as long as the call waits.
    struct call_arguments {
        std::string name;
        lock_options opt;
    };
    auto args = std::make_unique<call_arguments>();
    args->name = std::move(name);
    args->opt = std::move(opt);
    auto initiation = [impl, space = std::move(space), wait, finish,
                       args = std::move(args)](auto handler) mutable {
        auto [n, o] = std::move(*args);
        args.reset();
        try {
            validate(n, o);
        } catch (...) {
            detail::refuse_awaited<Result>(std::move(handler), impl->strand().get_inner_executor());
            return;
        }
        start_operation(
            impl->shared_from_this(), std::move(space), std::move(n), std::move(o), wait,
            std::move(handler), [finish](auto h, std::exception_ptr e, outcome_type out) {
                detail::complete_awaited<Result>(std::move(h), e, std::move(out), finish);
            });
    };
    return asio::async_initiate<asio::use_awaitable_t<> const, void(std::exception_ptr, Result)>(
        std::move(initiation), asio::use_awaitable);
}

} // namespace

void locker::start_lock(std::string name, lock_options opt, lock_handler handler) {
    start_operation(impl_, {impl_->prefix()}, std::move(name), std::move(opt), true,
                    std::move(handler), [](lock_handler h, std::exception_ptr e, outcome_type out) {
                        if (e) {
                            detail::complete_reporting(std::move(h), {}, e,
                                                       make_error_code(error::unexpected_reply),
                                                       lock_guard{});
                            return;
                        }
                        detail::complete_reporting(std::move(h), out.message, nullptr, out.ec,
                                                   lock_guard(std::move(out.state)));
                    });
}

void locker::start_try_lock(std::string name, lock_options opt, try_lock_handler handler) {
    start_operation(
        impl_, {impl_->prefix()}, std::move(name), std::move(opt), false, std::move(handler),
        [](try_lock_handler h, std::exception_ptr e, outcome_type out) {
            if (e) {
                detail::complete_reporting(std::move(h), {}, e,
                                           make_error_code(error::unexpected_reply),
                                           std::optional<lock_guard>{});
                return;
            }
            std::optional<lock_guard> g;
            if (out.state)
                g.emplace(lock_guard(std::move(out.state)));
            detail::complete_reporting(std::move(h), out.message, nullptr, out.ec, std::move(g));
        });
}

asio::awaitable<lock_guard> locker::co_lock(std::string_view name, lock_options opt) {
    return await_lock<lock_guard>(
        impl_.get(), {impl_->prefix()}, std::string(name), std::move(opt), true,
        [](outcome_type out) { return lock_guard(std::move(out.state)); });
}

asio::awaitable<std::optional<lock_guard>> locker::co_try_lock(std::string_view name,
                                                               lock_options opt) {
    return await_lock<std::optional<lock_guard>>(impl_.get(), {impl_->prefix()}, std::string(name),
                                                 std::move(opt), false, [](outcome_type out) {
                                                     std::optional<lock_guard> g;
                                                     if (out.state)
                                                         g.emplace(
                                                             lock_guard(std::move(out.state)));
                                                     return g;
                                                 });
}

namespace detail {

asio::awaitable<lock_guard> locker_impl::co_lock_in(key_space space, std::string name,
                                                    lock_options opt) {
    return await_lock<lock_guard>(
        this, std::move(space), std::move(name), std::move(opt), true,
        [](outcome_type out) { return lock_guard(std::move(out.state)); });
}

asio::awaitable<void> end_with_lock(lock_guard& guard, std::exception_ptr failure,
                                    bool lease_went_first) {
    // Read before the unlock, whichever branch won: the work may have ended after its lease
    // (a stall of the thread that kept the renewal and wait_lost from running), and what it did
    // then was not done under the lock.
    auto const why = guard.loss();
    std::string const name = guard.name();
    try {
        co_await guard.release(); // false at once for a lost lease; its release goes anyway
    } catch (boost::system::system_error const&) {
        // Not confirmed in time: the lease runs out by its ttl. What the work did stands.
    }
    if (!lease_went_first) {
        if (failure)
            std::rethrow_exception(failure);
        if (!why)
            co_return;
        throw boost::system::system_error(
            error::lock_lost,
            fmt::format("colock: lock '{}': lost while the work ran ({}); the work finished "
                        "after that, and its result is not returned",
                        name, to_string(*why)));
    }
    if (why)
        throw boost::system::system_error(
            error::lock_lost,
            fmt::format("colock: lock '{}': lost while the work ran ({}), which was cancelled",
                        name, to_string(*why)));
    throw boost::system::system_error(
        error::not_held,
        fmt::format("colock: lock '{}': the work let go of its guard, and was cancelled", name));
}

} // namespace detail

} // namespace colock
