// The family's one extend(): see lease_extension.hpp.
#include "lock/core/lease_extension.hpp"

#include "detail/awaitable_tokens.hpp"
#include "detail/failure_report.hpp"
#include "detail/spawn.hpp"
#include "lock/base/release_completion.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <exception>
#include <tuple>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

void check_extend_ttl(std::chrono::milliseconds ttl, std::string_view what) {
    if (ttl.count() <= 0 || ttl > max_lock_ttl)
        throw system_error(make_error_code(error::invalid_argument),
                           fmt::format("colock: extend of {}: ttl must be positive and at most "
                                       "max_lock_ttl ({} ms), got {} ms",
                                       what, max_lock_ttl.count(), ttl.count()));
}

void start_lease_extend(std::shared_ptr<lease> st, std::chrono::milliseconds ttl,
                        asio::any_completion_handler<void(error_code, bool)> handler,
                        std::string what) {
    if (!st || st->released()) {
        auto fallback =
            st ? st->strand().get_inner_executor() : asio::any_io_executor(asio::system_executor());
        post_reporting(fallback, std::move(handler), fmt::format("colock: extend of {}", what),
                       error_code(error::not_held), false);
        return;
    }
    if (st->lost()) {
        complete_soon(std::move(handler), st->strand().get_inner_executor(), error_code{}, false);
        return;
    }
    auto strand = st->strand();
    using extend_result = std::tuple<error_code, bool>;
    spawn_cancellable(strand, lease::extend(std::move(st), ttl), std::move(handler),
                      [what = std::move(what)](auto h, std::exception_ptr e, extend_result r) {
                          auto [ec, ours] = r;
                          if (e)
                              ec = error::unexpected_reply;
                          // Without the source location Asio attaches.
                          ec = error_code(ec.value(), ec.category());
                          if (!ec) {
                              std::move(h)(ec, ours);
                              return;
                          }
                          complete_reporting(
                              std::move(h), fmt::format("colock: extend of {}", what), e, ec, ours);
                      });
}

asio::awaitable<bool> await_lease_extend(std::shared_ptr<lease> st, std::chrono::milliseconds ttl,
                                         std::string what) {
    if (!st || st->released())
        throw system_error(make_error_code(error::not_held),
                           fmt::format("colock: extend of {}", what));
    check_extend_ttl(ttl, what);
    if (st->lost())
        co_return false;
    // On the locker's strand, where the renewal reads ttl and the lease's deadline.
    using extend_result = std::tuple<error_code, bool>;
    // Named, capturing no destructor (see run_lock); `st` keeps the state alive meanwhile.
    auto initiation = [raw = st.get(), ttl](auto handler) {
        auto state = raw->shared_from_this();
        auto strand = state->strand();
        spawn_cancellable(
            strand, lease::extend(std::move(state), ttl), std::move(handler),
            [](auto h, std::exception_ptr e, extend_result r) { std::move(h)(e, std::move(r)); });
    };
    auto [ex, result] = co_await asio::async_initiate<decltype(nothrow_awaitable) const,
                                                      void(std::exception_ptr, extend_result)>(
        std::move(initiation), nothrow_awaitable);
    if (ex)
        std::rethrow_exception(ex);
    auto [ec, ours] = result;
    if (ec)
        throw system_error(ec, fmt::format("colock: extend of {}", what));
    co_return ours;
}

} // namespace colock::detail
