// What a call or a coroutine threw: the system_error of an operation caught as its code and text,
// for tests that check how it is refused, and the end of a coroutine spawned on a context, for the
// loops that run one to completion, with or without a server.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
#include <string>
#include <utility>

namespace colock::test {

/// The code and text of the system_error an operation threw; both empty when it threw none.
struct failure {
    boost::system::error_code code;
    std::string what;
};

template <class T>
boost::asio::awaitable<failure> failure_of(boost::asio::awaitable<T> op) {
    failure out;
    try {
        co_await std::move(op);
    } catch (boost::system::system_error const& e) {
        out = {e.code(), e.what()};
    }
    co_return out;
}

/// failure_of for a call that throws before it starts anything.
template <class Call>
failure call_failure(Call call) {
    try {
        call();
    } catch (boost::system::system_error const& e) {
        return {e.code(), e.what()};
    }
    return {};
}

/// How a coroutine spawned by spawn_watched ended: whether it has, and what it threw.
struct coroutine_end {
    bool finished = false;
    std::exception_ptr thrown;
};

/// Spawns `op` on `ctx`, recording its end in `end` (which must outlive `ctx`).
template <class Awaitable>
void spawn_watched(boost::asio::io_context& ctx, Awaitable op, coroutine_end& end) {
    boost::asio::co_spawn(ctx, std::move(op), [&end](std::exception_ptr e) {
        end.thrown = e;
        end.finished = true;
    });
}

} // namespace colock::test
