// How colock tells with_diagnostics (colock/diagnostics.hpp) what a failing completion would
// throw in its awaitable form: a report on the completing thread while the handler runs.
// Private to the library's sources.
#pragma once

#include "detail/completion.hpp"

#include <colock/diagnostics.hpp>

#include <boost/system/error_code.hpp>

#include <exception>
#include <string>
#include <string_view>

namespace colock::detail {

// Makes `report` this thread's failure report for the scope's life (the handler's invocation
// inside it); the one before comes back after. No report for a success.
class failure_report_scope {
public:
    explicit failure_report_scope(failure_report const& report) noexcept;
    failure_report_scope(failure_report_scope const&) = delete;
    failure_report_scope& operator=(failure_report_scope const&) = delete;
    ~failure_report_scope();

private:
    failure_report const* previous_;
};

// Invokes `handler(ec, args...)` with the report of `ec` and `message` (or the exception
// `thrown`) for with_diagnostics to take.
template <class Handler, class... Args>
void complete_reporting(Handler&& handler, std::string_view message, std::exception_ptr thrown,
                        boost::system::error_code ec, Args&&... args) {
    if (!ec) {
        std::forward<Handler>(handler)(ec, std::forward<Args>(args)...);
        return;
    }
    failure_report const report{ec, message, std::move(thrown)};
    failure_report_scope scope(report);
    std::forward<Handler>(handler)(ec, std::forward<Args>(args)...);
}

// Calls `finish(handler, ec, outcome)` (whose `message` tells a failure, as the awaitable form
// throws it) with the report of `ec` and that message, or the exception `thrown`.
template <class Finish, class Handler, class Outcome>
void finish_reporting(Finish const& finish, Handler handler, boost::system::error_code ec,
                      std::exception_ptr thrown, Outcome outcome) {
    if (!ec) {
        finish(std::move(handler), ec, std::move(outcome));
        return;
    }
    auto const message = std::move(outcome.message);
    failure_report const report{ec, message, std::move(thrown)};
    failure_report_scope scope(report);
    finish(std::move(handler), ec, std::move(outcome));
}

// Completes `handler(ec, args...)` as post_completion does (never inside the call, on the
// handler's executor, else `io_executor`'s), with the report of `ec` and `message`.
template <class IoExecutor, class Handler, class... Args>
void post_reporting(IoExecutor const& io_executor, Handler handler, std::string message,
                    boost::system::error_code ec, Args... args) {
    post_invocation(
        io_executor, std::move(handler), boost::asio::cancellation_slot(),
        [message = std::move(message), ec, ... args = std::move(args)](Handler h) mutable {
            complete_reporting(std::move(h), message, nullptr, ec, std::move(args)...);
        });
}

} // namespace colock::detail
