/// \file
/// with_diagnostics(token): the async_* forms of colock's operations, failing as their awaitable
/// forms fail, with the text that names the lock and what ran out.
#pragma once

#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/system/error_code.hpp>

#include <exception>
#include <string_view>
#include <type_traits>
#include <utility>

namespace colock {

/// The completion token with_diagnostics() makes: `token` adapted. Its operations complete with
/// `std::exception_ptr` where they would complete with an error_code.
template <class Token>
struct with_diagnostics_t {
    /// The token adapted.
    Token token;
};

/// Adapts `token` so that an operation of signature `void(error_code, Args...)` completes it
/// with `void(std::exception_ptr, Args...)` instead: null on success, else the exception the
/// operation's awaitable form throws (co_lock's for async_lock, and so on): a
/// boost::system::system_error with the same code, whose what() names the lock (or semaphore,
/// read-write lock, election, lock set) and what ran out, or redis::connect_error when the
/// connection was never established. Meant for Boost.MySQL's idiom,
/// `co_await locker.async_lock(name, opt, colock::with_diagnostics(asio::use_awaitable))`, which
/// throws what co_lock throws, and for `use_future`, whose get() then does. A plain error_code
/// keeps only the code, whose message is the category's ("the operation's deadline passed").
///
/// For an operation that is not colock's (the connection's async_exec, an Asio timer), the
/// exception is a system_error of the code alone.
template <class Token>
with_diagnostics_t<std::decay_t<Token>> with_diagnostics(Token&& token) {
    return {std::forward<Token>(token)};
}

namespace detail {

/// What colock says of the failure it completes a handler with, on the thread that completes
/// it, for as long as the handler runs: the code, and either the exception the awaitable form
/// throws or the text it would carry. Set by the library; read by with_diagnostics.
struct failure_report {
    boost::system::error_code ec;
    std::string_view message;
    std::exception_ptr thrown;
};

/// The report of the failure being completed on this thread now, or null; the first call takes
/// it, so that a completion nested in the handler does not see it.
failure_report const* take_failure_report() noexcept;

/// The exception the awaitable forms throw for `ec` and `message`: redis::connect_error for a
/// connection never established, else system_error(ec, message) (the code alone when `message`
/// is empty).
std::exception_ptr failure_exception(boost::system::error_code ec, std::string_view message);

/// The handler with_diagnostics_t gives an operation: turns its error_code into the exception.
template <class Handler>
struct diagnosing_handler {
    template <class... Args>
    void operator()(boost::system::error_code ec, Args&&... args) {
        std::exception_ptr e;
        if (auto const* report = take_failure_report(); ec && report && report->ec == ec)
            e = report->thrown ? report->thrown : failure_exception(ec, report->message);
        else if (ec)
            e = failure_exception(ec, {});
        std::move(inner)(std::move(e), std::forward<Args>(args)...);
    }

    Handler inner;
};

template <class Signature>
struct diagnosing_signature;
template <class... Args>
struct diagnosing_signature<void(boost::system::error_code, Args...)> {
    using type = void(std::exception_ptr, Args...);
};

} // namespace detail
} // namespace colock

#if !defined(GENERATING_DOCUMENTATION)
namespace boost::asio {

/// How a with_diagnostics_t token completes: as `Token`, with the signature's error_code turned
/// into a std::exception_ptr.
template <class Token, class Signature>
struct async_result<colock::with_diagnostics_t<Token>, Signature>
    : async_result<Token, typename colock::detail::diagnosing_signature<Signature>::type> {
    /// The adapted token's async_result.
    using base =
        async_result<Token, typename colock::detail::diagnosing_signature<Signature>::type>;

    /// Gives the operation's initiation a diagnosing handler around the adapted token's.
    template <class Initiation>
    struct init_wrapper {
        /// Starts the operation with `handler` adapted.
        template <class Handler, class... Args>
        void operator()(Handler&& handler, Args&&... args) {
            std::move(initiation)(
                colock::detail::diagnosing_handler<std::decay_t<Handler>>{
                    std::forward<Handler>(handler)},
                std::forward<Args>(args)...);
        }
        /// The operation's initiation.
        Initiation initiation;
    };

    /// Starts the operation, completing the adapted token.
    template <class Initiation, class RawToken, class... Args>
    static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args) {
        // async_initiate rather than base::initiate: tokens of the older form (use_future's, in
        // Boost 1.81) have no initiate of their own.
        return boost::asio::async_initiate<
            std::conditional_t<std::is_const_v<std::remove_reference_t<RawToken>>, Token const,
                               Token>,
            typename colock::detail::diagnosing_signature<Signature>::type>(
            init_wrapper<std::decay_t<Initiation>>{std::forward<Initiation>(initiation)},
            token.token, std::forward<Args>(args)...);
    }
};

/// The diagnosing handler's associated executor, allocator and cancellation slot are its inner
/// handler's.
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct associator<Associator, colock::detail::diagnosing_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    /// The inner handler's.
    static typename Associator<Handler, DefaultCandidate>::type
    get(colock::detail::diagnosing_handler<Handler> const& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.inner);
    }
    /// The inner handler's, else `c`.
    static auto get(colock::detail::diagnosing_handler<Handler> const& h,
                    DefaultCandidate const& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.inner, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.inner, c);
    }
};

} // namespace boost::asio
#endif
