// A thread pool's executor that shows whether an operation let go of its handler's executor
// before its work, as Asio's own do: once the handler has run, the pool may be joined and
// destroyed at once, and a strand's executor that outlives its pool touches freed memory.
#pragma once

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace colock::test {

namespace asio = boost::asio;

// An executor of a thread pool that makes visible a copy of itself held on the I/O object's threads
// once the handler was handed to it: such a copy, destroyed there, first waits for the handler
// to have run, then up to 100 ms for the pool to be destroyed, counting it if it was. (A strand's
// executor that outlives its pool touches freed memory.)
struct late_copies {
    asio::io_context* ctx = nullptr;
    std::atomic<bool> handed_over{false};
    std::mutex mutex;
    std::condition_variable changed;
    bool handler_ran = false;
    bool pool_gone = false;
    int watching = 0; // copies in their destructor's wait
    int outlived_pool = 0;

    void mark(bool late_copies::*what) {
        std::lock_guard lock(mutex);
        this->*what = true;
        changed.notify_all();
    }
};

template <class Inner>
struct watched_executor {
    Inner inner;
    std::shared_ptr<late_copies> watch;

    watched_executor(Inner i, std::shared_ptr<late_copies> w) noexcept
        : inner(std::move(i)), watch(std::move(w)) {}
    watched_executor(watched_executor const&) noexcept = default;
    watched_executor(watched_executor&&) noexcept = default;
    watched_executor& operator=(watched_executor const&) noexcept = default;
    watched_executor& operator=(watched_executor&&) noexcept = default;
    ~watched_executor() {
        if (!watch || !watch->handed_over || !watch->ctx->get_executor().running_in_this_thread())
            return;
        std::unique_lock lock(watch->mutex);
        ++watch->watching;
        watch->changed.wait_for(lock, std::chrono::seconds(10), [&] { return watch->handler_ran; });
        // The window: 100 ms for the pool to go, if nothing holds it.
        if (watch->changed.wait_for(lock, std::chrono::milliseconds(100),
                                    [&] { return watch->pool_gone; }))
            ++watch->outlived_pool;
        --watch->watching;
        watch->changed.notify_all();
    }

    template <class F>
    void execute(F&& f) const {
        if (watch->ctx->get_executor().running_in_this_thread())
            watch->handed_over = true;
        inner.execute(std::forward<F>(f));
    }
    template <class Property>
    requires asio::can_query<Inner const&, Property>::value auto query(Property p) const {
        return asio::query(inner, p);
    }
    template <class Property>
    requires asio::can_require<Inner const&, Property>::value auto require(Property p) const {
        return watched_executor<std::decay_t<decltype(asio::require(inner, p))>>(
            asio::require(inner, p), watch);
    }
    template <class Property>
    requires asio::can_prefer<Inner const&, Property>::value auto prefer(Property p) const {
        return watched_executor<std::decay_t<decltype(asio::prefer(inner, p))>>(
            asio::prefer(inner, p), watch);
    }
    friend bool operator==(watched_executor const& a, watched_executor const& b) noexcept {
        return a.inner == b.inner;
    }
};

/// What became of one operation started by `start(handler)` with a handler bound to a watched
/// strand of a one-thread pool, on an I/O object run by `ctx`'s threads: whether the handler had
/// run when the pool's join() returned, and how many copies of its executor on `ctx`'s threads
/// outlived the pool.
struct late_copy_outcome {
    bool ran_before_join_returned = false;
    int copies_outliving_pool = 0;
};

template <class Start>
late_copy_outcome watch_late_copies(asio::io_context& ctx, Start start) {
    auto watch = std::make_shared<late_copies>();
    watch->ctx = &ctx;
    late_copy_outcome outcome;
    {
        asio::thread_pool pool{1};
        watched_executor ex{asio::make_strand(pool), watch};
        start(asio::bind_executor(ex,
                                  [watch](auto&&...) { watch->mark(&late_copies::handler_ran); }));
        pool.join(); // returns once the operation's work on the pool is gone
        std::lock_guard lock(watch->mutex);
        outcome.ran_before_join_returned = watch->handler_ran;
    }
    watch->mark(&late_copies::pool_gone);
    // A copy still waiting wakes at that and counts itself.
    std::unique_lock lock(watch->mutex);
    watch->changed.wait_for(lock, std::chrono::seconds(10), [&] { return watch->watching == 0; });
    outcome.copies_outliving_pool = watch->outlived_pool;
    return outcome;
}

} // namespace colock::test
